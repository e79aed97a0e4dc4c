// Package procstat reads what the kernel says about a process: its start
// time, which with the pid names one process even after pids wrap.
package procstat
