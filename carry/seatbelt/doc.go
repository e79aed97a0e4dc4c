// Package seatbelt is the connect-door carry: the wall macOS gives a run. The
// run is started under a Seatbelt (SBPL) profile that denies it every network
// connection except one, to the door's HTTP proxy on loopback, and its
// environment names that proxy to every common tool. The door then judges each
// CONNECT and absolute-URI request as it does anywhere else.
//
// The package builds the profile from the policy, the door's port and the
// places the run works in (Profile, Places), the run's environment (Env), and
// starts the command under /usr/bin/sandbox-exec (Raise). The profile and the
// environment are pure data and are tested as such on any system; a profile is
// only enforced on a Mac.
package seatbelt
