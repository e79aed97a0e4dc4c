# Observe mode: every connection the hard floor permits goes through, and each
# one that "enforce" would have refused is recorded with would_deny set.
#
# Use it for a first run of a new agent to learn which hosts and ports it
# needs, then let postern write the enforce policy from what it did:
#
#   postern run --policy examples/policies/observe.hcl -- my-agent
#   postern policy from-run RUN-ID > agent.hcl     # review it, then use it
#
# In observe mode the wall sends TCP to every port to the door, so a port
# outside `ports` is recorded too rather than refused. The hard floor
# (loopback, link-local, cloud metadata, ...) stays shut in observe mode too,
# and private addresses are recorded as would-deny unless allow_cidrs lists
# them.
name  = "observe everything"
mode  = "observe"
ports = [80, 443] # in observe mode: which ports enforce would allow

# Names listed here are recorded as allowed rather than would-deny, which keeps
# the record focused on what is new.
allow = [
  "github.com",
]
