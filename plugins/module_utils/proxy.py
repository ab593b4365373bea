# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The site's proxy, as every stage applies it (pure functions; issue 31).

One set of settings (``instinct_http_proxy``, ``instinct_https_proxy``, ``instinct_no_proxy``) becomes:

- the environment of the tasks that reach outside the cluster (apt, pip, the wheel builds' ``git
  clone`` and ``pip wheel``, the hub client of a job): ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` and
  their lower-case forms, which apt, pip (requests), git (libcurl), huggingface_hub and Ansible's own
  ``get_url``/``uri`` read;
- the apt snippet that keeps apt (later runs, an operator's ``apt-get``, unattended upgrades) on the
  proxy once the play is over.

``no_proxy`` is the site's own entries first, as given, then the loopback names and every node's
addresses (its inventory name, ``ansible_host``, management and fabric address, the fabric CIDR):
what nodes fetch from each other (the wheel server, the LLaMA-Factory dependency share, the master's
rendezvous, Prometheus's scrapes) must never go through the proxy. Entries are deduplicated
(case-insensitively, the first spelling kept) in a stable order, so a re-run renders the same text.

With neither proxy set, the environment is empty: a node keeps whatever its own environment says.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from urllib.parse import urlsplit

RUNBOOK = "docs/runbooks/proxy.md"
LOOPBACK = ("localhost", "127.0.0.1", "::1")
SCHEMES = ("http", "https")
# Characters that cannot stand in a proxy URL handed to apt's configuration (a quoted string) or to an
# environment variable read by every tool: whitespace, quotes, a separator of no_proxy.
_BAD = re.compile(r"[\s\"';,]")
_SPLIT = re.compile(r"[,\s]+")


def split_no_proxy(value):
    """A site's no_proxy as a list of entries, from a list or a comma/space separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        items = _SPLIT.split(value)
    elif isinstance(value, (list, tuple)):
        items = []
        for item in value:
            if not isinstance(item, str):
                raise ValueError(
                    f"instinct_no_proxy holds {item!r}, which is not a host name, address, .domain or CIDR. "
                    f"Give a list of strings (or one comma-separated string). See {RUNBOOK}."
                )
            items.extend(_SPLIT.split(item))
    else:
        raise ValueError(
            f"instinct_no_proxy is {value!r}: give a list of host names, addresses, .domains or CIDRs "
            f"(or one comma-separated string). See {RUNBOOK}."
        )
    entries = [item.strip() for item in items if item.strip()]
    for entry in entries:
        # Each entry becomes an apt option name (Acquire::http::Proxy::ENTRY "DIRECT";): a quote, brace
        # or semicolon there would break apt's configuration, and every apt call with it.
        if not _NO_PROXY_ENTRY.match(entry):
            raise ValueError(
                f"instinct_no_proxy holds {entry!r}, which is not a host name, address, .domain, * or CIDR "
                f"(letters, digits and . - _ * : / [ ] only). See {RUNBOOK}."
            )
    return entries


_NO_PROXY_ENTRY = re.compile(r"^[A-Za-z0-9._*:/\[\]-]+$")


def node_entries(nodes):
    """The no_proxy entries of the cluster's nodes, in inventory order.

    ``nodes``: a list of dicts, one per node, with any of ``name`` (inventory name), ``ansible_host``,
    ``management`` (the default IPv4 address), ``listen`` (instinct_management_address when the
    inventory sets it: where the node's listeners bind), ``fabric`` (the fabric address) and ``cidr``
    (the fabric network). Empty or missing values are skipped; the CIDRs come after every address, since curl
    before 7.86 (Ubuntu 22.04's git) does not understand them and needs the addresses themselves.
    """
    hosts, cidrs = [], []
    for node in nodes or []:
        for key in ("name", "ansible_host", "management", "listen", "fabric"):
            value = node.get(key)
            if isinstance(value, str) and value.strip():
                hosts.append(value.strip())
        cidr = node.get("cidr")
        if isinstance(cidr, str) and cidr.strip():
            cidrs.append(cidr.strip())
    return hosts + cidrs


def _dedupe(entries):
    seen, out = set(), []
    for entry in entries:
        key = entry.lower()
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


def effective_no_proxy(site_no_proxy, nodes, extra=()):
    """The no_proxy string every task and job gets: the site's entries (kept, first, as given), the
    loopback names, then ``extra`` (addresses a role names itself) and the nodes' entries."""
    entries = split_no_proxy(site_no_proxy) + list(LOOPBACK) + split_no_proxy(list(extra)) + node_entries(nodes)
    return ",".join(_dedupe(entries))


def redact(url):
    """A proxy URL fit to show: the password (and a user given alone) replaced by ``***``."""
    if not isinstance(url, str) or "@" not in url:
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, hostpart = rest.rsplit("@", 1)
    user = userinfo.split(":", 1)[0]
    shown = f"{user}:***" if ":" in userinfo else "***"
    return f"{scheme}{sep}{shown}@{hostpart}"


def has_credentials(url):
    """Whether a proxy URL carries a user or password (then it is a secret)."""
    if not isinstance(url, str) or not url:
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return "@" in url
    return bool(parts.username or parts.password)


def check_proxy_url(name, value, host="this node"):
    """``value`` if it is empty or a usable proxy URL, else ValueError naming host, variable, fix and
    runbook (the password never shown)."""
    if value is None or value == "":
        return ""
    fix = f"Set {name} to a URL such as http://proxy.example.com:3128, or to '' for no proxy. See {RUNBOOK}."
    if not isinstance(value, str):
        raise ValueError(f"{host}: {name} is {value!r}, not a URL. {fix}")
    shown = redact(value)
    if _BAD.search(value):
        raise ValueError(f"{host}: {name} is {shown!r}: it holds a space, quote, comma or semicolon. {fix}")
    try:
        parts = urlsplit(value)
        _port = parts.port  # urlsplit checks the port only when asked for it
    except ValueError:
        raise ValueError(f"{host}: {name} is {shown!r}: its port is not a number from 0 to 65535. {fix}") from None
    if parts.username or parts.password:
        # Ansible hands a task's environment to the node on its command line (sh -c 'HTTP_PROXY=... python3'),
        # which every local user sees in ps while apt and pip run, and sudo writes into the auth log.
        raise ValueError(
            f"{host}: {name} is {shown!r}: it holds a user or password, which would be on the nodes' command "
            "lines (ps) and in sudo's log of every task that uses the proxy. Let the proxy admit the nodes by "
            f"address (or use a proxy the nodes reach without credentials). {fix}"
        )
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        raise ValueError(
            f"{host}: {name} is {shown!r}: apt, pip and git need the scheme and the host "
            f"(http:// or https://, then host[:port]). {fix}"
        )
    return value


def proxy_environment(http_proxy, https_proxy, site_no_proxy, nodes, *, extra=(), host="this node"):  # noqa: PLR0913 - the three settings as the user names them
    """The environment of every task that reaches outside the cluster: {} when neither proxy is set
    (the node's own environment stands), else the proxies set and NO_PROXY, each in both cases."""
    http_proxy = check_proxy_url("instinct_http_proxy", http_proxy, host)
    https_proxy = check_proxy_url("instinct_https_proxy", https_proxy, host)
    no_proxy = effective_no_proxy(site_no_proxy, nodes, extra)
    if not http_proxy and not https_proxy:
        return {}
    env = {}
    for name, value in (("HTTP_PROXY", http_proxy), ("HTTPS_PROXY", https_proxy)):
        if value:
            env[name] = value
            env[name.lower()] = value
    env["NO_PROXY"] = no_proxy
    env["no_proxy"] = no_proxy
    return env


def is_secret(env):
    """Whether a proxy environment holds a password or user (files holding it stay root-only)."""
    return any(has_credentials((env or {}).get(name)) for name in ("HTTP_PROXY", "HTTPS_PROXY"))


def _apt_direct_host(entry):
    # apt matches Acquire::http::Proxy::<host> against the exact host of a source: no CIDRs, no
    # .domain suffixes or wildcards, and no IPv6 addresses (their colons would split the key).
    return not any(c in entry for c in "/*:") and not entry.startswith(".")


def apt_proxy_conf(env):
    """The apt.conf.d snippet for a proxy environment (``proxy_environment``'s result): '' when it is
    empty. The proxies become Acquire::http::Proxy / Acquire::https::Proxy (apt reads no environment
    under unattended upgrades), and every exact host of no_proxy a DIRECT exception."""
    env = env or {}
    http_proxy, https_proxy = env.get("HTTP_PROXY", ""), env.get("HTTPS_PROXY", "")
    if not http_proxy and not https_proxy:
        return ""
    lines = [
        "// The site's proxy for apt, written by instinct.finetune from instinct_http_proxy,",
        "// instinct_https_proxy and instinct_no_proxy; removed when both proxies are set to ''.",
    ]
    schemes = [("http", http_proxy), ("https", https_proxy)]
    for scheme, value in schemes:
        if value:
            lines.append(f'Acquire::{scheme}::Proxy "{value}";')
    for entry in split_no_proxy(env.get("NO_PROXY", "")):
        if _apt_direct_host(entry):
            for scheme, value in schemes:
                if value:
                    lines.append(f'Acquire::{scheme}::Proxy::{entry} "DIRECT";')
    return "\n".join(lines) + "\n"
