"""Key paths and their lines in TOML files, arrays of tables included."""

from __future__ import annotations

from pathlib import Path

from gateway.tomlfile import key_path, read_toml

NESTED = """\
[[a]]
x = 1
[[a.b]]
y = 2
[[a.b]]
y = 3
[[a]]
[[a.b]]
"z.w" = 4
[c]
d.e = 5
"""


def test_arrays_of_tables_are_indexed_per_parent_element(tmp_path: Path) -> None:
    path = tmp_path / "f.toml"
    path.write_text(NESTED)
    lines = dict(read_toml(path).lines)
    assert lines[("a", 0, "x")] == 2
    assert lines[("a", 0, "b", 1, "y")] == 6
    assert lines[("a", 1)] == 7
    assert lines[("a", 1, "b", 0, "z.w")] == 9
    assert lines[("c", "d", "e")] == 11


def test_errors_point_at_the_element(tmp_path: Path) -> None:
    path = tmp_path / "f.toml"
    path.write_text(NESTED)
    doc = read_toml(path)
    assert str(doc.error(("a", 0, "b", 1, "y"), "bad")) == f"{path}:6: a[0].b[1].y: bad"
    assert str(doc.error(("a", 1, "b", 0, "q"), "missing")) == f"{path}:8: a[1].b[0].q: missing"


def test_key_path_quotes_what_is_not_a_bare_key() -> None:
    assert key_path(("users", "bob smith", "password")) == 'users."bob smith".password'
    assert key_path(("federate", 2, "type")) == "federate[2].type"
