# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The apt sources a node already has for AMD's repositories, and how the rocm role writes its own
beside them without a Signed-By conflict (pure functions over the files' text).

AMD's documented method (ROCm's "Ubuntu native installation", and ``amdgpu-install``) writes one-line
sources, ``/etc/apt/sources.list.d/rocm.list`` and ``amdgpu.list``, each entry with
``signed-by=/etc/apt/keyrings/rocm.gpg`` (the key dearmored). apt refuses two entries for one
repository (URI and suite) whose Signed-By differ: "Conflicting values set for option Signed-By
regarding source URI SUITE: A != B", and reads no source at all.

The decision (``plan``): the role's deb822 files take the place of AMD's files for the repositories
it manages, and use AMD's keyring when it holds the expected key.
- Replace, not keep beside: a ``rocm.list`` left for another release keeps offering that release's
  packages above the pin, so ``apt upgrade`` would move the node off the release the role installed;
  one file per repository, for one release, is what the role can keep right.
- Their keyring, not a second one: ``amdgpu-install`` (re)writes its lists with
  ``signed-by=/etc/apt/keyrings/rocm.gpg`` when it is upgraded or run again; with the same keyring in
  the role's files that never conflicts. It is used only when the key inside has the expected
  fingerprint (the same check a downloaded key passes).
- A file that also names other repositories is not AMD's to replace: an entry in it for a managed
  repository with another Signed-By is reported as the conflict it is, before anything is written.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

EMBEDDED_KEY = "(a key embedded in the file)"


def _norm(uri):
    return str(uri or "").strip().rstrip("/")


def parse_one_line(text, path):
    """Entries of a one-line-style file (``sources.list``, ``*.list``): ``{file, type, uri, suite,
    signed_by}`` for each ``deb``/``deb-src`` line (signed_by None when the line names none)."""
    entries = []
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _space, rest = line.partition(" ")
        if kind not in ("deb", "deb-src"):
            continue
        rest = rest.strip()
        options = {}
        if rest.startswith("["):
            inside, _bracket, rest = rest[1:].partition("]")
            for word in inside.split():
                key, sep, value = word.partition("=")
                if sep:
                    options[key.strip().lower()] = value.strip()
        words = rest.split()
        if len(words) < 2:
            continue
        signed_by = options.get("signed-by")
        entries.append({"file": path, "type": kind, "uri": _norm(words[0]), "suite": words[1], "signed_by": signed_by})
    return entries


def _stanzas(text):
    stanza, key = {}, None
    for raw in [*(text or "").splitlines(), ""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if stanza:
                yield stanza
            stanza, key = {}, None
        elif raw[0] in " \t" and key:
            stanza[key] += "\n" + raw.strip()
        elif ":" in raw:
            key, _colon, value = raw.partition(":")
            key = key.strip().lower()
            stanza[key] = value.strip()


def parse_deb822(text, path):
    """Entries of a deb822 file (``*.sources``), one per type, URI and suite; a stanza with
    ``Enabled: no`` is left out, a key written into the file itself reads as ``EMBEDDED_KEY``."""
    entries = []
    for stanza in _stanzas(text):
        if stanza.get("enabled", "yes").strip().lower() == "no":
            continue
        signed_by = stanza.get("signed-by")
        if signed_by and "BEGIN PGP" in signed_by:
            signed_by = EMBEDDED_KEY
        elif signed_by:
            signed_by = signed_by.split()[0]
        for kind in stanza.get("types", "").split():
            for uri in stanza.get("uris", "").split():
                for suite in stanza.get("suites", "").split():
                    entries.append(
                        {"file": path, "type": kind, "uri": _norm(uri), "suite": suite, "signed_by": signed_by or None}
                    )
    return entries


def parse_files(files):
    """Every entry of ``files`` (``{path: text}``), each file read in the style its name says."""
    entries = []
    for path in sorted(files):
        if path.endswith(".sources"):
            entries.extend(parse_deb822(files[path], path))
        else:
            entries.extend(parse_one_line(files[path], path))
    return entries


def amd_prefixes(base_url):
    """AMD's repository folders under ``base_url``: ROCm, amdgpu and graphics (every release)."""
    base = _norm(base_url)
    return tuple(f"{base}/{folder}/" for folder in ("rocm/apt", "amdgpu", "graphics"))


def is_amd(entry, base_url):
    return (entry["uri"] + "/").startswith(amd_prefixes(base_url))


def keyring_candidates(entries, base_url, own_files, keyring=None):
    """The keyrings that entries for AMD's repositories name, first seen first: other files' first,
    then the role's own files' (AMD's keyring adopted on an earlier run, whose lists the role has
    replaced since, stays adopted: a later amdgpu-install writes lists naming it again). ``keyring``,
    where the role puts the key itself, is not a candidate."""
    seen = []
    for own_pass in (False, True):
        for entry in entries:
            path = entry["signed_by"]
            if (entry["file"] in own_files) != own_pass or not is_amd(entry, base_url):
                continue
            if path and path.startswith("/") and path != keyring and path not in seen:
                seen.append(path)
    return seen


def plan(entries, settings, keyring_fingerprints):
    """How the role's source files go beside what the node has.

    ``entries``: ``parse_files`` of the node's sources. ``settings``: ``uris`` (the repositories the role
    writes, its enabled ones), ``base_url``, ``own_files`` (the role's own paths), ``fingerprint`` (the
    expected key) and ``keyring`` (where the role puts the key otherwise), the module's options.
    ``keyring_fingerprints``: ``{path: [fingerprints]}`` of the candidate keyrings (an unreadable or
    absent one: ``[]``).

    Returns ``{keyring, adopted, replace, conflicts}``: the Signed-By the role's files name (an
    existing AMD keyring with the expected key, else ``settings["keyring"]``), the files it replaces
    (outside ``own_files``, in sources.list.d, every entry one of AMD's repositories), and the
    entries that would still conflict (``{file, uri, suite, signed_by}``: another file's entry for a
    managed repository with another Signed-By).
    """
    base_url, fingerprint = settings["base_url"], settings["fingerprint"]
    want = str(fingerprint or "").replace(" ", "").upper()
    own = set(settings.get("own_files") or [])
    keyring, adopted = settings["keyring"], False
    for path in keyring_candidates(entries, base_url, own, settings["keyring"]):
        # AMD's key alone: a keyring holding other keys as well would let them sign for AMD's origin,
        # which the pin puts above the distribution.
        if want and [str(fp).upper() for fp in keyring_fingerprints.get(path) or []] == [want]:
            keyring, adopted = path, True
            break
    by_file = {}
    for entry in entries:
        by_file.setdefault(entry["file"], []).append(entry)
    replace = sorted(
        path
        for path, found in by_file.items()
        if path not in own and "/sources.list.d/" in path and all(is_amd(entry, base_url) for entry in found)
    )
    managed_uris = {_norm(uri) for uri in settings["uris"]}
    conflicts = [
        {key: entry[key] for key in ("file", "uri", "suite", "signed_by")}
        for entry in entries
        if entry["file"] not in own
        and entry["file"] not in replace
        and entry["uri"] in managed_uris
        and entry["signed_by"] != keyring
    ]
    return {"keyring": keyring, "adopted": adopted, "replace": replace, "conflicts": conflicts}


def conflict_problem(conflicts, keyring):
    """The conflicts of ``plan`` in words, with the fix; ``""`` when there are none."""
    if not conflicts:
        return ""
    named = "; ".join(
        f"{item['file']} names {item['uri']} {item['suite']} with signed-by {item['signed_by'] or '(none)'}"
        for item in conflicts
    )
    return (
        f'apt would refuse every source ("Conflicting values set for option Signed-By"): {named}, and this role '
        f"names the same repository with Signed-By {keyring}. That file is not one of AMD's own in sources.list.d "
        "(it lists other repositories too, or is sources.list itself), so the role does not replace it: remove its "
        f"entries for AMD's repositories (the role writes them), or make their signed-by {keyring}. Nothing was changed"
    )
