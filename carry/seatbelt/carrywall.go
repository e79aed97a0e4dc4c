package seatbelt

import "github.com/postern-dev/postern/carry"

// A Wall is a carry.Wall: dispatch supervises it as every other carry's.
var _ carry.Wall = (*Wall)(nil)
