// Package rung holds what a probe measures, as data: each rung's name, its
// yes/no result with what happened and the fix, and the Record of one
// machine's rungs at one time. It is a leaf: the records store and
// carry.Choose read records without pulling in the measurements, which need
// the walls and their kernel libraries (package probe).
package rung
