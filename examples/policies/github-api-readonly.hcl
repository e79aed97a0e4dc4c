# GitHub for reading one organisation's repositories, with a token the agent
# never holds.
#
# Clones and fetches go to github.com as usual, spliced end to end. The API
# host is inspected: the door terminates its TLS with the run's own
# certificate authority (trusted inside the run only), judges every request
# by method and path, and adds the Authorization header itself, from
# GITHUB_TOKEN in postern's own environment. The run's environment does not
# have the variable; a token the API echoes back reaches the run masked.
name  = "github api, read-only, one organisation"
mode  = "enforce"
ports = [443]

allow = [
  "github.com",                 # web, api.github.com, codeload.github.com
  "githubusercontent.com",
]

inspect "api.github.com" {
  allow_methods = ["GET", "HEAD"]
  allow_paths   = ["/repos/acme/**", "/orgs/acme/**", "/user", "/rate_limit"]
  deny_paths    = ["/repos/acme/*/actions/**"]  # no workflow logs or artifacts
  inject_header = { Authorization = "env:GITHUB_TOKEN" }
}
