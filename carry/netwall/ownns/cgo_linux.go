//go:build cgo

package ownns

// withCgo: see Enter.
const withCgo = true
