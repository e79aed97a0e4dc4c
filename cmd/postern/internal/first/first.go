// Package first is the command's first act, before the initialisers of the
// rest of postern run: a run by a user without privileges moves postern into
// a user namespace of its own there (see carry/netwall/ownns). main imports
// it for that alone; Go initialises it as soon as package syscall is, since
// it needs nothing else.
package first

import "github.com/postern-dev/postern/carry/netwall/ownns"

func init() { ownns.Enter() }
