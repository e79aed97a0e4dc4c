// Package netwall raises the Linux network wall: a run in its own user, network, pid
// and mount namespaces whose only way out is the door.
package netwall
