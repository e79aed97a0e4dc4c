// Package kernel says which kernel this process runs on.
package kernel

import "strconv"

// AtLeast says whether the running kernel's release is major.minor or later;
// false where it cannot be read.
func AtLeast(major, minor int) bool {
	return ReleaseAtLeast(Release(), major, minor)
}

// ReleaseAtLeast compares a kernel release such as "6.18.44-generic" with
// major.minor.
func ReleaseAtLeast(release string, major, minor int) bool {
	// By hand rather than with package strings, whose initialiser (through
	// package unicode) would run before this package's users'.
	maj, rest := release, ""
	for i := 0; i < len(release); i++ {
		if release[i] == '.' {
			maj, rest = release[:i], release[i+1:]
			break
		}
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			rest = rest[:i]
			break
		}
	}
	ma, err1 := strconv.Atoi(maj)
	mi, err2 := strconv.Atoi(rest)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}
