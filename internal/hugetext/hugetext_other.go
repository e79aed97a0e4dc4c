//go:build !linux

package hugetext

import (
	"errors"
	"os"
)

// Arg names a primer's stage (see the Linux side).
const Arg = "__prime-text"

// Held: huge page-cache folios are a Linux matter.
func Held() bool { return false }

// HeldBy: none off Linux.
func HeldBy(string) (int64, error) { return 0, errors.ErrUnsupported }

// Possible: not off Linux.
func Possible() bool { return false }

// PrimeFile does nothing off Linux.
func PrimeFile(string) (int64, error) { return 0, errors.ErrUnsupported }

// CachedHuge is 0 off Linux.
func CachedHuge(string) (int64, error) { return 0, errors.ErrUnsupported }

// AtExit does nothing off Linux.
func AtExit(string) {}

// Exit exits with code.
func Exit(code int) { os.Exit(code) }

// Main returns 2: there is nothing to prime off Linux.
func Main([]string) int { return 2 }
