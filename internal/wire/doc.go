// Package wire is the framing every control channel of postern speaks: the
// remote agent's stream, the network wall's socket to its init, the
// container bridge's socket to its harness. A frame is one byte of type, a
// 4-byte big-endian length and the payload; a reader never allocates more
// than the limit its caller gives, whatever the length says.
package wire
