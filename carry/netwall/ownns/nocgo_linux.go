//go:build !cgo

package ownns

// withCgo says whether this binary has cgo, whose threads
// syscall.AllThreadsSyscall cannot reach: it is never launched (see Enter).
const withCgo = false
