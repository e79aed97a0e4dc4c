// Package door judges every connection a run opens: it decides by destination
// against the run's policy and the hard floor, connects or refuses, and records each
// decision as an Event. It serves an explicit proxy (HTTP CONNECT and absolute-URI HTTP),
// a transparent listener fed by the wall (SO_ORIGINAL_DST), and the wall's DNS.
package door
