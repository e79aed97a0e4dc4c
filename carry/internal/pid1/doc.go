// Package pid1 holds what a process does as pid 1 of a pid namespace that runs
// one command: reap every process that ends there (pid 1 inherits the
// orphans), forward signals to the command's process group, and kill every
// process of the namespace when the run must end.
//
// The container harness and the network wall's init both run the command this
// way; each keeps its own control protocol and hands Supervise the signals it
// is asked to forward.
package pid1
