package testhosts

import (
	"bytes"
	"sync"
)

// LockedBuffer is a buffer that goroutines may write and read at once: a
// command's stdout and stderr copied into it while a test reads what it has
// printed so far.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
