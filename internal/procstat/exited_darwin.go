package procstat

import "golang.org/x/sys/unix"

// Exited reports whether pid is a process that has ended but is not yet
// reaped (a zombie): it still has its start time, and runs nothing.
func Exited(pid int) bool {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || kp.Proc.P_pid != int32(pid) {
		return false
	}
	return kp.Proc.P_stat == 5 // SZOMB
}
