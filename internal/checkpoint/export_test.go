package checkpoint

import "io"

// Uploads returns how many objects s has written.
func Uploads(s *BlobStore) int64 { return s.uploads.Load() }

// SetUploadHook makes s write each object through hook(w).
func SetUploadHook(s *BlobStore, hook func(io.Writer) io.Writer) { s.hook = hook }
