# Observe mode: every connection the hard floor permits goes through, and each
# one that "enforce" would have refused is recorded with would_deny set.
#
# Use it for a first run of a new agent to learn which hosts it needs, then
# turn the recorded names into allow rules and switch to mode = "enforce".
# The hard floor (loopback, link-local, cloud metadata, ...) stays shut in
# observe mode too, and private addresses are recorded as would-deny unless
# allow_cidrs lists them.
name  = "observe everything"
mode  = "observe"
ports = [80, 443]

# Names listed here are recorded as allowed rather than would-deny, which keeps
# the record focused on what is new.
allow = [
  "github.com",
]
