// Package kernel says which kernel this process runs on.
package kernel

import (
	"strconv"
	"strings"
)

// AtLeast says whether the running kernel's release is major.minor or later;
// false where it cannot be read.
func AtLeast(major, minor int) bool {
	return ReleaseAtLeast(Release(), major, minor)
}

// ReleaseAtLeast compares a kernel release such as "6.18.44-generic" with
// major.minor.
func ReleaseAtLeast(release string, major, minor int) bool {
	maj, rest, _ := strings.Cut(release, ".")
	if end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); end >= 0 {
		rest = rest[:end]
	}
	ma, err1 := strconv.Atoi(maj)
	mi, err2 := strconv.Atoi(rest)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}
