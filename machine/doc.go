// Package machine names the hosts runs are dispatched to: local, and hosts reached
// over ssh.
package machine
