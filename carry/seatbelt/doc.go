// Package seatbelt builds the macOS sandbox profile that denies all network but the
// door's port.
package seatbelt
