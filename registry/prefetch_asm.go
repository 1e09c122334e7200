//go:build (amd64 || arm64) && gc && !purego

package registry

import "unsafe"

// prefetch asks the processor to bring the cache line at p into its
// caches, without waiting for it: unlike a load, a prefetch is not ordered
// with the locked instruction that takes a mutex, so the two cache misses
// overlap. p need not be valid memory.
//
//go:noescape
func prefetch(p unsafe.Pointer)
