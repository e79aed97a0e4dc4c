//go:build unix

package workspace

import "syscall"

const syscallNoFollow = syscall.O_NOFOLLOW
