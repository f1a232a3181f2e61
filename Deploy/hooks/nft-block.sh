#!/bin/sh
# Tandem hook: block outbound traffic to the locked mode's sites at the packet level, with an
# nftables table `inet tandem` (an output chain rejecting the sites' resolved IPv4 and IPv6
# addresses). Catches what the hosts file cannot: programs with their own resolver (DNS over
# HTTPS in browsers), or addresses cached before the lock.
#
#   locked, relocked, temp_unlocked  (re)create the table for TANDEM_BLOCKED_SITES and their www.
#                                    forms, minus TANDEM_TEMP_ITEMS (one atomic nft transaction)
#   unlocked                         delete the table
#
# Install (HOOKS is the node's hooks directory):
#   for t in locked unlocked temp_unlocked relocked; do
#     install -D -m 0755 Deploy/hooks/nft-block.sh "$HOOKS/all/$t.d/20-nft-block"
#   done
#
# Needs nft (apt install nftables) and CAP_NET_ADMIN (root, or the node's systemd drop-in with
# CAP_NET_ADMIN, see Deploy/README.md). Without either it says so and exits 1, so the node
# reports the failure. The rule applies to every user of the machine, not only the node's.
#
# Addresses are resolved when the hook runs. The hosts-file block maps the sites to 0.0.0.0/::,
# so the hook asks DNS directly (`getent -s dns`) and drops 0.0.0.0, ::, loopback answers; a
# local resolver that also reads /etc/hosts (systemd-resolved with ReadEtcHosts=yes) would hide
# the real addresses: set DNS_SERVER below to ask a DNS server with dig (dnsutils) instead.
# Sites behind CDNs change addresses: the table is rebuilt on each relock, not in between.
set -u

DNS_SERVER=""        # e.g. "9.9.9.9"; empty: the system's DNS configuration
TABLE="inet tandem"

say() { echo "nft-block: $*" >&2; }

if ! command -v nft >/dev/null 2>&1; then
    say "nft is not installed (apt install nftables); no packet-level block"
    exit 1
fi

# Run nft with "$@" (stdin passed on); explain a permission problem in one line.
run_nft() {
    err=$(nft "$@" 2>&1 >/dev/null) && return 0
    case $err in
        *"Operation not permitted"* | *"Permission denied"*)
            say "not permitted to change the firewall: the node (and so this hook) needs CAP_NET_ADMIN; see Deploy/README.md" ;;
        *) say "nft $*: $err" ;;
    esac
    return 1
}

delete_table() {
    err=$(nft delete table $TABLE 2>&1) && return 0
    case $err in
        *"No such file"*) return 0 ;;   # not there: nothing to undo
        *"Operation not permitted"* | *"Permission denied"*)
            say "not permitted to change the firewall: the node (and so this hook) needs CAP_NET_ADMIN; see Deploy/README.md" ;;
        *) say "nft delete table $TABLE: $err" ;;
    esac
    return 1
}

# Addresses of a name, one per line.
resolve() {
    if [ -n "$DNS_SERVER" ] && command -v dig >/dev/null 2>&1; then
        dig +short +time=2 +tries=1 A "$1" "@$DNS_SERVER"
        dig +short +time=2 +tries=1 AAAA "$1" "@$DNS_SERVER"
    else
        getent -s dns ahosts "$1" | awk '{ print $1 }'
    fi
}

case ${TANDEM_TRANSITION:-} in
    unlocked) delete_table; exit $? ;;
    locked | relocked | temp_unlocked) ;;
    *) say "unknown transition '${TANDEM_TRANSITION:-}'"; exit 2 ;;
esac

names=""
for site in ${TANDEM_BLOCKED_SITES:-}; do
    skip=no
    for item in ${TANDEM_TEMP_ITEMS:-}; do [ "$item" = "$site" ] && skip=yes; done
    [ $skip = yes ] && continue
    case $site in www.*) names="$names $site" ;; *) names="$names $site www.$site" ;; esac
done

addrs=$(for name in $names; do resolve "$name"; done | sort -u)
v4="" v6="" count=0
for addr in $addrs; do
    case $addr in
        0.0.0.0 | 127.* | :: | ::1) continue ;;
        *:*) case $addr in *[!0-9a-fA-F:.]*) continue ;; *) v6="$v6${v6:+, }$addr" ;; esac ;;
        *.*.*.*) case $addr in *[!0-9.]*) continue ;; *) v4="$v4${v4:+, }$addr" ;; esac ;;
        *) continue ;;
    esac
    count=$((count + 1))
done

if [ -z "$v4$v6" ]; then
    echo "nft-block: no addresses to block (no sites, or none resolved); table $TABLE removed"
    delete_table
    exit $?
fi

elements4="" elements6=""
[ -n "$v4" ] && elements4=" elements = { $v4 };"
[ -n "$v6" ] && elements6=" elements = { $v6 };"
ruleset=$(
    echo "table $TABLE"
    echo "delete table $TABLE"
    echo "table $TABLE {"
    echo "    set blocked4 { type ipv4_addr; flags interval; auto-merge;$elements4 }"
    echo "    set blocked6 { type ipv6_addr; flags interval; auto-merge;$elements6 }"
    echo "    chain output {"
    echo "        type filter hook output priority 0; policy accept;"
    echo "        ip daddr @blocked4 reject with icmpx type admin-prohibited"
    echo "        ip6 daddr @blocked6 reject with icmpx type admin-prohibited"
    echo "    }"
    echo "}"
)
printf '%s\n' "$ruleset" | run_nft -f - || exit 1
echo "nft-block: table $TABLE rejects $count addresses for:$names"
