package kernel

import "syscall"

// Release is the running kernel's release (uname -r), or "" where it cannot
// be read. It needs nothing but package syscall, so that a package
// initialiser that runs before the rest of postern's (carry/netwall/ownns)
// can ask.
func Release() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return ""
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
