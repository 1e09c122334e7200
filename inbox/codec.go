package inbox

import "encoding/json"

// Codec turns a job's payload into the bytes stored in the payload column and back.
// A Codec must be safe for concurrent use.
type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// JSON is the default Codec: encoding/json.
type JSON[T any] struct{}

// Encode marshals v with encoding/json.
func (JSON[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

// Decode unmarshals b with encoding/json.
func (JSON[T]) Decode(b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}
