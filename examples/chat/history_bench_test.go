package chat

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkAppendBatch is the history owner's transaction: 256 messages
// committed together (ns/op per message), flushed to the disk (full) or not
// (normal).
func BenchmarkAppendBatch(b *testing.B) {
	for _, mode := range []Sync{SyncFull, SyncNormal} {
		b.Run(mode.String(), func(b *testing.B) { benchAppendBatch(b, mode) })
	}
}

func benchAppendBatch(b *testing.B, mode Sync) {
	ctx := context.Background()
	s, err := OpenStore(ctx, filepath.Join(b.TempDir(), "h.db"), mode)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ms := make([]Message, 256)
	for i := range ms {
		ms[i] = Message{From: fmt.Sprintf("u%05d", i), To: fmt.Sprintf("u%05d", i+1), Text: "12 1764633600000000000"}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.AppendBatch(ctx, ms, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ms)), "ns/message")
}
