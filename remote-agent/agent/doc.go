// Package agent is postern's remote agent: the process that runs beside a run on a
// machine reached over ssh, its wire protocol, and how the controller installs it.
//
// The agent is the postern binary itself, started as 'postern __agent serve'. It
// raises the wall and the door on the remote with the same code a local run uses,
// streams the run's output and the door's events back, and takes stdin, signals
// and terminal sizes from the controller. When the controller goes away (stdin
// ends, or heartbeats stop) it kills the run and tears the wall down.
//
// The controller installs the agent by content hash under
// ~/.cache/postern/agents/<hash>/ (or a configured directory): upload to a
// temporary name, then an atomic rename, then the file's attributes are
// measured over sftp and recorded. Before each use the controller looks at the
// file over sftp again (running nothing of it) and compares; a file that
// differs is read back and hashed, and one that is not the agent is installed
// again, with a warning (see FileState). The agent must then also answer the
// handshake with the expected version and hash.
//
// On the wire, each side first writes Magic and a hello frame, so that anything a
// remote shell prints before the agent starts fails the handshake cleanly. Then
// both sides exchange frames: one type byte, a four-byte big-endian length, and the
// payload.
package agent
