// Package door judges every connection a run opens: it decides by destination
// against the run's policy and the hard floor, connects or refuses, and records each
// decision as an Event. It serves an explicit proxy (HTTP CONNECT and absolute-URI HTTP),
// a transparent listener fed by the wall (SO_ORIGINAL_DST), and the wall's DNS. For a
// host the policy inspects it terminates TLS with the run's Authority, judges each
// request by method and path, adds the configured headers and masks their values in
// what comes back; every other host's TLS is spliced, never decrypted.
package door
