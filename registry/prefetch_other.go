//go:build (!amd64 && !arm64) || !gc || purego

package registry

import "unsafe"

// prefetch does nothing on this platform (see prefetch_asm.go).
func prefetch(unsafe.Pointer) {}
