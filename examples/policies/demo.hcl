# The policy of the offline demo. Its hosts are test hosts in their own
# network namespaces, reached through pinned names:
#
#   allowed.demo.test         allowed, by name (10.203.0.2)
#   api.allowed.demo.test     allowed: a name covers its subdomains
#   denied.allowed.demo.test  refused: deny wins over allow
#   forbidden.demo.test       refused: no allow rule names it
#
# The demo hosts live at private addresses, and a name alone never opens a
# private address, so their range is listed in allow_cidrs as well.
name  = "offline demo"
mode  = "enforce"
ports = [80, 443]

allow       = ["allowed.demo.test"]
deny        = ["denied.allowed.demo.test"]
allow_cidrs = ["10.203.0.0/24"]
