"""The file_state module against what Ansible's own copy, template and file modules write: a playbook
installs a folder tree, a file from content and a template, then the module, fed by the checksums
lookup, the template lookup and the file_entries filter as the roles feed it, must find all of it
current; each kind of drift (content, mode, a missing file, a file where a folder belongs) must be
named."""

import grp
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.instinct.finetune.plugins.filter.files import file_entries
from ansible_collections.instinct.finetune.plugins.lookup.checksums import landing, tree_entries
from ansible_collections.instinct.finetune.plugins.module_utils.file_state import (
    differences,
    expected_entries,
    observe,
)
from tests.unit.conftest import COLLECTIONS, ROOT, run_module

USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    dest: {dest}
    src: {src}
    greeting: hello
    a_json: "{{{{ {{'a': 1}} | to_nice_json }}}}\\n"
  tasks:
    - name: Create the folder
      ansible.builtin.file: {{path: "{{{{ dest }}}}/conf", state: directory, mode: "0750"}}
    - name: Copy a folder's content
      ansible.builtin.copy:
        {{src: "{{{{ src }}}}/", dest: "{{{{ dest }}}}/model/", owner: "{user}", group: "{group}", mode: "0644",
         directory_mode: "0750"}}
    - name: Write content
      ansible.builtin.copy: {{content: "{{{{ a_json }}}}", dest: "{{{{ dest }}}}/conf/a.json", mode: "0644"}}
    - name: Copy a file found in the playbook's files folder
      ansible.builtin.copy: {{src: note.txt, dest: "{{{{ dest }}}}/conf/note.txt", mode: "0644"}}
    - name: Copy two files into a folder
      ansible.builtin.copy: {{src: "{{{{ src }}}}/{{{{ item }}}}", dest: "{{{{ dest }}}}/conf/", mode: "0640"}}
      loop: [config.json, sub/weights.bin]
    - name: Render a template
      ansible.builtin.template: {{src: "{{{{ src }}}}/../unit.j2", dest: "{{{{ dest }}}}/conf/unit", mode: "0600"}}
    - name: Compare
      instinct.finetune.file_state:
        files: >-
          {{{{ query('instinct.finetune.checksums', src ~ '/', dest=dest ~ '/model/', owner='{user}', group='{group}',
                   mode='0644', directory_mode='0750')
             + query('instinct.finetune.checksums', 'note.txt', dest=dest ~ '/conf/note.txt', mode='0644')
             + query('instinct.finetune.checksums', src ~ '/config.json', src ~ '/sub/weights.bin',
                     dest=dest ~ '/conf/', mode='0640')
             + [dest ~ '/conf'] | instinct.finetune.file_entries(state='directory', mode='0750', group='{group}')
             + [dest ~ '/conf/a.json'] | instinct.finetune.file_entries(checksum=a_json | hash('sha1'), mode='0644')
             + [dest ~ '/conf/unit'] | instinct.finetune.file_entries(mode='0600',
                 checksum=lookup('ansible.builtin.template', src ~ '/../unit.j2') | hash('sha1')) }}}}
      register: state
    - name: Show
      ansible.builtin.debug: {{var: state}}
"""


@pytest.fixture
def installed(tmp_path):
    src = tmp_path / "src" / "model"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text('{"hidden": 8}\n')
    (src / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    # A folder linked from elsewhere: copy follows it (local_follow), so must the lookup.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "tokenizer.json").write_text("{}\n")
    (src / "linked").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "note.txt").write_text("found next to the playbook\n")
    template = "# {{ ansible_managed }}\n[Service]\nEnvironment=GREETING={{ greeting }}\n"
    template += "{% if true %}\nx=1\n{% endif %}\n"
    (tmp_path / "src" / "unit.j2").write_text(template)
    dest = tmp_path / "dest"
    book = tmp_path / "play.yml"
    book.write_text(PLAYBOOK.format(dest=dest, src=src, user=USER, group=GROUP))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1")  # fmt: skip
    playbook = Path(sys.executable).parent / "ansible-playbook"
    argv = [str(playbook), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"]
    proc = subprocess.run([*argv, str(book)], capture_output=True, text=True, env=env, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    tasks = json.loads(proc.stdout[proc.stdout.find("{") :])["plays"][0]["tasks"]
    state = next(t for t in tasks if t["task"]["name"] == "Compare")["hosts"]["localhost"]
    return {"dest": dest, "src": src, "state": state}


def compare(entries, extra=()):
    return run_module("file_state", json.dumps({"files": entries}), extra)


def test_what_copy_template_and_file_wrote_is_current(installed):
    state = installed["state"]
    assert state["current"] is True, state["differs"]
    # The model folder, its two sub folders (one linked) and three files; note.txt; two files copied
    # into conf; conf; a.json; unit.
    assert state["compared"] == 12
    assert (installed["dest"] / "model" / "linked" / "tokenizer.json").is_file()
    assert state["differs"] == []
    assert state["changed"] is False


def test_each_kind_of_drift_is_named(installed):
    dest, src = installed["dest"], installed["src"]
    entries = tree_entries(str(src), str(dest / "model"), owner=USER, group=GROUP, mode="0644", directory_mode="0750")
    entries += [{"path": str(dest / "conf"), "state": "directory", "mode": "0750"}]
    rc, result = compare(entries)
    assert (rc, result["current"]) == (0, True), result

    (dest / "model" / "sub" / "weights.bin").write_bytes(b"other weights")
    os.chmod(dest / "model" / "config.json", 0o664)
    os.chmod(dest / "model" / "sub", 0o700)
    os.chmod(dest / "conf", 0o700)
    _rc, result = compare(entries)
    assert result["current"] is False
    assert result["differs"] == [
        {"path": str(dest / "model" / "sub"), "reason": "mode 0700, not 0750"},
        {"path": str(dest / "model" / "config.json"), "reason": "mode 0664, not 0644"},
        {"path": str(dest / "model" / "sub" / "weights.bin"), "reason": "content differs"},
        {"path": str(dest / "conf"), "reason": "mode 0700, not 0750"},
    ]

    (dest / "model" / "sub" / "weights.bin").unlink()
    (dest / "model" / "sub" / "weights.bin").mkdir()
    (dest / "model" / "config.json").unlink()
    _rc, result = compare(entries, ["--check"])
    reasons = {d["path"]: d["reason"] for d in result["differs"]}
    assert reasons[str(dest / "model" / "config.json")] == "missing"
    assert reasons[str(dest / "model" / "sub" / "weights.bin")] == "a directory, not a file"


def test_a_path_that_must_not_exist(tmp_path):
    gone, left = tmp_path / "gone.json", tmp_path / "left.json"
    left.write_text("{}")
    entries = expected_entries([{"path": str(gone), "state": "absent"}, {"path": str(left), "state": "absent"}])
    seen = {str(p): observe(str(p), False) for p in (gone, left)}
    assert differences(entries, seen) == [{"path": str(left), "reason": "present (a file)"}]


def test_a_file_without_a_checksum_or_a_relative_path_is_refused_before_reading():
    rc, result = compare([{"path": "/etc/hostname"}])
    assert rc != 0
    assert "without the checksum" in result["msg"]
    with pytest.raises(ValueError, match="not an absolute path"):
        expected_entries([{"path": "etc/hostname", "checksum": "0" * 40}])
    with pytest.raises(ValueError, match="listed twice"):
        expected_entries([{"path": "/a", "state": "directory"}, {"path": "/a", "state": "directory"}])
    with pytest.raises(ValueError, match="octal mode"):
        expected_entries([{"path": "/a", "state": "directory", "mode": "rw-r--r--"}])


def test_only_what_an_entry_names_is_compared(tmp_path):
    path = tmp_path / "f"
    path.write_text("x")
    os.chmod(path, 0o640)
    seen = {str(path): observe(str(path), True)}
    # No owner, group or mode named: a file with the right content is current whatever its mode.
    assert differences(expected_entries([{"path": str(path), "checksum": seen[str(path)]["checksum"]}]), seen) == []
    checksum = seen[str(path)]["checksum"]
    wrong_owner = expected_entries([{"path": str(path), "checksum": checksum, "owner": "nobody-here"}])
    assert differences(wrong_owner, seen) == [{"path": str(path), "reason": f"owner {USER}, not nobody-here"}]


def test_a_folder_may_be_a_link_to_one_and_a_file_may_not(tmp_path):
    (tmp_path / "scratch").mkdir()
    (tmp_path / "hf-home").symlink_to(tmp_path / "scratch")
    (tmp_path / "real.env").write_text("A=1\n")
    (tmp_path / "linked.env").symlink_to(tmp_path / "real.env")
    checksum = observe(str(tmp_path / "real.env"), True)["checksum"]
    entries = expected_entries([
        {"path": str(tmp_path / "hf-home"), "state": "directory"},
        {"path": str(tmp_path / "linked.env"), "checksum": checksum},
    ])  # fmt: skip
    seen = {
        str(tmp_path / "hf-home"): observe(str(tmp_path / "hf-home"), False, follow=True),
        str(tmp_path / "linked.env"): observe(str(tmp_path / "linked.env"), True),
    }
    assert differences(entries, seen) == [{"path": str(tmp_path / "linked.env"), "reason": "a link, not a file"}]


def test_the_lookup_refuses_a_link_back_into_the_tree_or_to_nothing(tmp_path):
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "sub" / "up").symlink_to(model)
    with pytest.raises(ValueError, match="links back into the folder that holds it"):
        tree_entries(str(model), "/opt/model")
    (model / "sub" / "up").unlink()
    (model / "gone.bin").symlink_to(tmp_path / "nothing")
    with pytest.raises(ValueError, match="leads nowhere"):
        tree_entries(str(model), "/opt/model")


def test_the_lookup_lands_files_where_copy_puts_them(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    one = tmp_path / "one.py"
    one.write_text("")
    # copy's rules: a folder with a trailing / puts its content in dest; without, the folder itself.
    assert landing(f"{folder}/", str(folder), "/opt/m") == "/opt/m"
    assert landing(str(folder), str(folder), "/opt/m") == "/opt/m/model"
    assert landing(str(one), str(one), "/opt/lib/") == "/opt/lib/one.py"
    assert landing(str(one), str(one), "/opt/lib/two.py") == "/opt/lib/two.py"


def test_file_entries_gives_every_path_the_same_attributes():
    assert file_entries(["/a", "/b"], state="directory", mode="0755") == [
        {"path": "/a", "state": "directory", "mode": "0755"},
        {"path": "/b", "state": "directory", "mode": "0755"},
    ]
    assert file_entries("/a", checksum="c") == [{"path": "/a", "checksum": "c"}]
