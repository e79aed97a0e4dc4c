// Package sshclient connects to a machine over ssh the way OpenSSH would:
// its configuration (package machine reads it), jump hosts, proxy commands,
// known hosts and user certificates. It is apart from package machine so that
// the inventory and the lanes can be read without x/crypto/ssh.
package sshclient
