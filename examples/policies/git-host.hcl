# Clone, fetch and push over HTTPS to the common git hosts, and nothing else.
#
# A name covers itself and every subdomain: "github.com" also admits
# api.github.com and codeload.github.com. Git over ssh (port 22) is not
# covered: the wall only sends the ports listed below to the door, so use
# HTTPS remotes (https://github.com/org/repo.git).
name  = "git hosts over HTTPS"
mode  = "enforce"
ports = [443]

allow = [
  "github.com",                 # web, api.github.com, codeload.github.com
  "githubusercontent.com",      # raw.githubusercontent.com, objects.githubusercontent.com
  "gitlab.com",
  "codeberg.org",
  "bitbucket.org",
]

# Deny wins over allow: keep gists, a convenient place to paste secrets, shut.
deny = [
  "gist.github.com",
  "gist.githubusercontent.com",
]
