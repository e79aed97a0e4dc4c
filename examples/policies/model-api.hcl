# Let a coding agent talk to its model provider, and to nothing else.
#
# Both entries carry ":443", so the rule admits only HTTPS to these hosts,
# even though port 80 is listed in ports for the other rules a team may add.
name  = "model APIs"
mode  = "enforce"
ports = [80, 443]

allow = [
  "api.anthropic.com:443",
  "api.openai.com:443",
]

# Besides its working directory, the agent writes for real only its own state
# (by default ~/.claude, ~/.claude.json and ~/.codex); what it writes elsewhere
# in the home is private to the run. To keep even its state private:
# writable = []
