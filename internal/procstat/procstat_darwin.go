package procstat

import "golang.org/x/sys/unix"

// StartTime is a process's start time in microseconds since the epoch (the
// kernel's kinfo_proc), or 0 when it cannot be read. With the pid it names
// one process even after pids wrap.
func StartTime(pid int) uint64 {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || kp.Proc.P_pid != int32(pid) {
		return 0
	}
	tv := kp.Proc.P_starttime
	return uint64(tv.Sec)*1e6 + uint64(tv.Usec)
}
