package inbox

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Codec turns a job's payload into the bytes stored in the payload column and back.
// A Codec must be safe for concurrent use. A Decode error (or panic) dead-letters the
// job with a *DecodeError.
type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// ErrNullPayload is the decode error of a JSON payload that is null (or empty, as a
// NULL payload column reads).
var ErrNullPayload = errors.New("inbox: payload is JSON null")

// JSON is the default Codec: encoding/json. It refuses a null payload (the JSON
// literal null, or no bytes at all, as a NULL payload column reads) with
// ErrNullPayload rather than handing the handler a zero value: an outside writer's
// null is almost always a mistake, and its job is dead-lettered where it can be seen.
// A job type that means to accept null needs a Codec of its own.
type JSON[T any] struct{}

// Encode marshals v with encoding/json.
func (JSON[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

// Decode unmarshals b with encoding/json; null is refused with ErrNullPayload.
func (JSON[T]) Decode(b []byte) (T, error) {
	var v T
	if t := bytes.TrimSpace(b); len(t) == 0 || string(t) == "null" {
		return v, ErrNullPayload
	}
	err := json.Unmarshal(b, &v)
	return v, err
}
