//go:build !unix

package kernel

// Release is "" where there is no uname.
func Release() string { return "" }
