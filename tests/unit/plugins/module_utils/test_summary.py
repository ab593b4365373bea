"""The summary's Markdown rendering (module_utils/summary.py, issue 28): the summary.md a person
reads in the collect folder, the same rows as the printed table."""

from ansible_collections.instinct.finetune.plugins.module_utils.summary import node_rows, render_markdown
from tests.unit.plugins.filter.test_summary import HOSTVARS


def table_rows(text):
    """The cells of each table line of a Markdown document, pipes escaped inside a cell kept."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = line.strip().strip("|").replace("\\|", "\x00").split("|")
            rows.append([cell.strip().replace("\x00", "\\|") for cell in cells])
    return rows


def test_a_markdown_table_with_a_title_one_row_per_node_and_what_a_dash_means():
    text = render_markdown(node_rows(HOSTVARS, ["mi300x-01", "mi300x-02", "cpu-01"]))
    lines = text.splitlines()
    assert lines[0] == "# Node summary" and lines[1] == ""
    rows = table_rows(text)
    assert rows[0][:4] == ["node", "OS", "ROCm", "gfx"] and rows[0][-1] == "stability"
    assert all(set(cell) == {"-"} and len(cell) >= 3 for cell in rows[1])
    assert [row[0] for row in rows[2:]] == ["mi300x-01", "mi300x-02", "cpu-01"]
    assert rows[2][12:] == ["llama3-lora succeeded 120/120", "deepspeed_zero3 lora", "5.432", "9.100", "+40.3%", "pass"]
    assert rows[3][1:] == ["Ubuntu 22.04", "-", "-", "-", "8", "4 missing"] + ["-"] * 11
    assert all(len(row) == 18 for row in rows)
    assert "`-`: the stage did not run on that node" in text
    assert text.endswith("\n")


def test_columns_are_padded_so_the_raw_text_reads_as_a_table():
    lines = [line for line in render_markdown([["a", "1"], ["longer-node", "22"]], headers=["node", "n"]).splitlines()
             if line.startswith("|")]  # fmt: skip
    assert lines == [
        "| node        | n   |",
        "| ----------- | --- |",
        "| a           | 1   |",
        "| longer-node | 22  |",
    ]


def test_a_cell_stays_one_cell_on_one_line():
    text = render_markdown([["n1", "a | b", "two\nlines", "", "back\\slash"]], headers=["node", "x", "y", "z", "w"])
    row = table_rows(text)[2]
    assert row == ["n1", "a \\| b", "two lines", "-", "back\\\\slash"]
