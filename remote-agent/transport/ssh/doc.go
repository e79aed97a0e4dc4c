// Package ssh carries the remote agent over one ssh connection: its
// installation through sftp (or, where the remote refuses the subsystem,
// through shell commands that read, write and describe files) and the
// agent's own streams through an ssh session. It implements agent.Transport,
// the seam the agent's install-and-retry logic is tested behind with a fake.
package ssh
