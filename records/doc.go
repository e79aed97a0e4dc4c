// Package records stores machines, probe records, runs and their events in one bbolt
// file, durably and without stalling a running run.
package records
