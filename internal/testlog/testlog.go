// Package testlog holds [Buffer], where a test collects what its loggers
// or child processes write while it reads what they wrote so far.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer collects output; it is safe for concurrent use, so a test can read
// it while a logger or a process writes. The zero value is empty and ready
// to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
