# An inventory of remote machines: 'postern machine import examples/machines.hcl'.
#
# It says how to reach each machine, never what it can do: imported machines are
# unmeasured, and runs on them are refused until 'postern machine probe-confinement
# NAME' (or --all) has measured them through postern's agent.

# An alias from ~/.ssh/config: HostName, User, Port, IdentityFile, ProxyJump, ProxyCommand and
# the rest come from there, as they would for 'ssh gpu1'.
machine "gpu1" {
  ssh    = "gpu1"
  labels = { gpu = "a100", team = "research" }
  # Every run on gpu1 is given these, their values taken from postern's own
  # environment at each run: names only, values are never written anywhere.
  env = ["ANTHROPIC_API_KEY"]
}

# A host reached directly, with its own key, whose home is mounted noexec: the
# agent goes to a directory that allows executables.
machine "ci-runner" {
  ssh       = "runner@ci.internal.example:2222"
  identity  = "~/.ssh/ci_ed25519"
  agent_dir = "/var/lib/postern/agents"
  labels    = { role = "ci" }
}
