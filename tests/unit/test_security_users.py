"""The users file: loading with precise errors, atomic rewrites, the guest default, passwd."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gateway.security import users as users_module
from gateway.security.passwd import run_passwd, set_password
from gateway.security.passwords import hash_password
from gateway.security.permissions import Grants, Permission, TopicPermission
from gateway.security.users import User, UsersDB, UsersFileError, is_loopback

ALICE_HASH = hash_password("alice-pw")
NAME_RULE = "1-255 bytes, no control characters"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "users.toml"
    path.write_text(text)
    return path


def load_error(path: Path) -> str:
    with pytest.raises(UsersFileError) as caught:
        UsersDB.load(path)
    return str(caught.value)


# --- loading -------------------------------------------------------------------------------


def test_load_users_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
[users.alice]
password = "{ALICE_HASH}"
vhosts = ["/", "prod"]
tags = ["administrator"]

[users.bob]
password = "{ALICE_HASH}"

[users.guest]
password = "{ALICE_HASH}"
""",
    )
    db = UsersDB.load(path)
    assert db.path == path
    assert len(db) == 3 and "alice" in db and "carol" not in db
    assert db.get("alice") == User("alice", frozenset({"/", "prod"}), ("administrator",))
    assert db.get("bob") == User("bob", None, ())
    # guest stays loopback-only even when a users file defines it, as in RabbitMQ.
    assert db.get("guest") == User("guest", None, (), loopback_only=True)
    assert db.verify("alice", "alice-pw")
    assert not db.verify("alice", "wrong")
    assert not db.verify("carol", "alice-pw")


def test_loopback_only_can_be_switched(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f'[users.guest]\npassword = "{ALICE_HASH}"\nloopback_only = false\n'
        f'[users.ops]\npassword = "{ALICE_HASH}"\nloopback_only = true\n',
    )
    db = UsersDB.load(path)
    assert db.get("guest").loopback_only is False  # type: ignore[union-attr]
    assert db.get("ops").loopback_only is True  # type: ignore[union-attr]


def test_empty_file_has_no_users(tmp_path: Path) -> None:
    assert len(UsersDB.load(write(tmp_path, "# nobody yet\n"))) == 0


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[users.alice]\npassword = "abc\n')
    assert load_error(path) == f"{path}:2:16: invalid TOML: Illegal character '\\n'"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    assert load_error(path) == f"{path}: cannot read: No such file or directory"


def test_plain_text_password_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[users.alice]\nvhosts = ["/"]\npassword = "hunter2"\n')
    message = load_error(path)
    assert message == (
        f"{path}:3: users.alice.password: this looks like a plain-text password; "
        "store a hash made by 'amq-gateway passwd FILE USER' instead"
    )
    assert "hunter2" not in message


def test_malformed_hash(tmp_path: Path) -> None:
    path = write(tmp_path, '[users.alice]\npassword = "scrypt$n=3,r=8,p=1$AAAA$AAAA"\n')
    assert load_error(path) == (
        f"{path}:2: users.alice.password: malformed password hash: unusable scrypt parameters n=3, r=8, p=1"
    )


def test_unknown_key(tmp_path: Path) -> None:
    path = write(tmp_path, f'[users.alice]\npassword = "{ALICE_HASH}"\nvhost = "/"\n')
    assert load_error(path) == (
        f"{path}:3: users.alice.vhost: unknown key (known: password, vhosts, tags, loopback_only, permissions, topic_permissions, limits)"
    )


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, "[user.alice]\n")
    assert load_error(path) == (
        f"{path}:1: user: unknown key (a users file holds only [users.<name>] and [credentials.<login>] tables)"
    )


def test_wrong_types(tmp_path: Path) -> None:
    path = write(tmp_path, f'[users.alice]\npassword = "{ALICE_HASH}"\nvhosts = "/"\n')
    assert load_error(path) == (
        f"{path}:3: users.alice.vhosts: expected an array of non-empty strings, got '/'"
    )
    path = write(tmp_path, f'[users.alice]\npassword = "{ALICE_HASH}"\ntags = [1]\n')
    assert load_error(path) == (
        f"{path}:3: users.alice.tags: expected an array of non-empty strings, got an array"
    )
    path = write(tmp_path, "[users.alice]\npassword = 12\n")
    assert load_error(path) == (f"{path}:2: users.alice.password: expected a password hash string, got 12")
    path = write(tmp_path, f'[users.guest]\npassword = "{ALICE_HASH}"\nloopback_only = "no"\n')
    assert load_error(path) == (f"{path}:3: users.guest.loopback_only: expected true or false, got 'no'")
    path = write(tmp_path, 'users = "alice"\n')
    assert load_error(path) == f"{path}:1: users: expected a table of users, got 'alice'"
    path = write(tmp_path, "[users]\nalice = 1\n")
    assert load_error(path) == f"{path}:2: users.alice: expected a table, got 1"


def test_missing_password_and_quoted_names(tmp_path: Path) -> None:
    path = write(tmp_path, '# users\n\n[users."bob smith"]\nvhosts = ["/"]\n')
    assert load_error(path) == f"{path}:3: users.\"bob smith\": missing key 'password'"


def test_bad_user_name(tmp_path: Path) -> None:
    path = write(tmp_path, f'[users."a\\tb"]\npassword = "{ALICE_HASH}"\n')
    assert load_error(path) == (
        f"{path}:1: users.\"a\\tb\": invalid user name 'a\\tb': 1-255 bytes, no control characters"
    )


def test_inline_tables_point_at_their_line(tmp_path: Path) -> None:
    path = write(tmp_path, f'[users]\nbob = {{ password = "{ALICE_HASH}" }}\nalice = {{ tags = 3 }}\n')
    assert load_error(path) == f"{path}:3: users.alice: missing key 'password'"


# --- credentials this node presents to others -----------------------------------------------


def test_credentials_are_read_in_plain_text(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f'[users.peering]\npassword = "{ALICE_HASH}"\n\n'
        '[credentials.peering]\npassword = "s3cret"\n[credentials."edge one"]\npassword = "p@ss/w"\n',
    )
    db = UsersDB.load(path)
    assert db.credentials == {"peering": "s3cret", "edge one": "p@ss/w"}
    assert db.get("peering") == User("peering", None, (), loopback_only=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("credentials = 3\n", "1: credentials: expected a table of logins, got 3"),
        ("[credentials.peering]\n", "1: credentials.peering: missing key 'password'"),
        (
            "[credentials.peering]\npassword = 3\n",
            "2: credentials.peering.password: expected the password as a non-empty string, got 3",
        ),
        (
            '[credentials.peering]\npassword = ""\n',
            "2: credentials.peering.password: expected the password as a non-empty string, got ''",
        ),
        (
            '[credentials.peering]\npassword = "x"\nuser = "y"\n',
            "3: credentials.peering.user: unknown key (known: password)",
        ),
    ],
)
def test_credential_errors(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    assert load_error(path) == f"{path}:{message}"


def test_passwd_keeps_the_credentials(tmp_path: Path) -> None:
    path = write(tmp_path, '[credentials.peering]\npassword = "s3cret"\n')
    assert set_password(path, "alice", "pw") is True
    assert UsersDB.load(path).credentials == {"peering": "s3cret"}


# --- the built-in default --------------------------------------------------------------------


def test_default_is_guest_from_loopback_only() -> None:
    db = UsersDB.default()
    assert db.path is None
    guest = db.get("guest")
    assert guest == User("guest", None, ("administrator",), loopback_only=True)
    assert db.verify("guest", "guest")
    assert not db.verify("guest", "Guest")
    for host in ("127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1", "::1%1"):
        assert guest.may_connect_from(host), host
    for host in ("10.0.0.1", "192.168.1.1", "::ffff:10.0.0.1", "2001:db8::1", "localhost", ""):
        assert not guest.may_connect_from(host), host
    assert User("alice").may_connect_from("10.0.0.1")


def test_default_has_the_peering_login_from_loopback_only() -> None:
    db = UsersDB.default()
    assert db.get("peering") == User("peering", None, (), loopback_only=True)
    assert db.verify("peering", "peering")
    assert db.credentials == {}


def test_is_loopback() -> None:
    assert is_loopback("127.255.255.254")
    assert not is_loopback("128.0.0.1")
    assert not is_loopback("not an address")


def test_unknown_users_still_cost_a_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    decoy = users_module._decoy()
    monkeypatch.setattr(users_module, "_decoy", lambda: decoy)
    original = type(decoy).verify
    monkeypatch.setattr(type(decoy), "verify", lambda self, pw: checked.append(pw) or original(self, pw))
    assert not UsersDB.default().verify("mallory", "pw")
    assert checked == ["pw"]


def test_successful_checks_are_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = UsersDB.load(write(tmp_path, f'[users.alice]\npassword = "{ALICE_HASH}"\n'))
    assert db.verify("alice", "alice-pw")
    calls: list[str] = []
    monkeypatch.setattr("gateway.security.passwords.PasswordHash.verify", lambda self, pw: calls.append(pw))
    assert db.verify("alice", "alice-pw")  # from the cache: no hashing
    assert calls == []
    assert not db.verify("alice", "wrong")  # failures are never cached
    assert calls == ["wrong"]


# --- writing ---------------------------------------------------------------------------------


def test_set_password_creates_a_private_file_without_the_password(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    assert set_password(path, "alice", "correct horse", ["/", "prod"]) is True
    text = path.read_text()
    assert "correct horse" not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    db = UsersDB.load(path)
    assert db.get("alice") == User("alice", frozenset({"/", "prod"}))
    assert db.verify("alice", "correct horse")
    assert [p.name for p in tmp_path.iterdir()] == ["users.toml"]  # no temp file left behind


def test_set_password_changes_and_keeps_everything_else(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f'[users.alice]\npassword = "{ALICE_HASH}"\ntags = ["administrator", "monitoring"]\n'
        f'[users."bob smith"]\npassword = "{ALICE_HASH}"\nvhosts = ["/"]\n'
        f'[users.guest]\npassword = "{ALICE_HASH}"\nloopback_only = false\n',
    )
    path.chmod(0o644)
    assert set_password(path, "alice", "new-pw") is False
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    db = UsersDB.load(path)
    assert db.verify("alice", "new-pw") and not db.verify("alice", "alice-pw")
    assert db.get("alice") == User("alice", None, ("administrator", "monitoring"))
    assert db.get("bob smith") == User("bob smith", frozenset({"/"}))
    assert db.get("guest") == User("guest", None, (), loopback_only=False)
    assert db.verify("bob smith", "alice-pw")
    assert set_password(path, "alice", "new-pw", vhosts=["dev"]) is False
    assert UsersDB.load(path).get("alice").vhosts == frozenset({"dev"})  # type: ignore[union-attr]


def test_set_password_quotes_awkward_names(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    for name in ('qu"ote', "back\\slash", "ünïcødé", "dotted.name"):
        set_password(path, name, "pw", [f"v{name}"])
    db = UsersDB.load(path)
    for name in ('qu"ote', "back\\slash", "ünïcødé", "dotted.name"):
        assert db.get(name) == User(name, frozenset({f"v{name}"})), name


def test_set_password_guest_is_loopback_only_by_default(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    set_password(path, "guest", "pw")
    assert "loopback_only" not in path.read_text()
    assert UsersDB.load(path).get("guest").loopback_only  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "password", "vhosts", "message"),
    [
        ("", "pw", None, "invalid user name '': 1-255 bytes, no control characters"),
        ("a\0b", "pw", None, "invalid user name 'a\\x00b': 1-255 bytes, no control characters"),
        ("x" * 256, "pw", None, f"invalid user name '{'x' * 256}': {NAME_RULE}"),
        ("alice", "", None, "the password must not be empty"),
        ("alice", "pw", [""], "vhosts: expected an array of non-empty strings, got an array"),
    ],
)
def test_set_password_refuses_bad_input(
    tmp_path: Path, name: str, password: str, vhosts: list[str] | None, message: str
) -> None:
    with pytest.raises(ValueError) as caught:
        set_password(tmp_path / "users.toml", name, password, vhosts)
    assert str(caught.value) == message
    assert not (tmp_path / "users.toml").exists()


def test_set_password_refuses_to_rewrite_a_broken_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[users.alice]\npassword = "plain"\n')
    with pytest.raises(UsersFileError):
        set_password(path, "bob", "pw")
    assert path.read_text() == '[users.alice]\npassword = "plain"\n'


# --- passwd ----------------------------------------------------------------------------------


def test_run_passwd_adds_then_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "users.toml"
    assert run_passwd(path, "alice", "pw1", ["/"]) == 0
    assert capsys.readouterr().out == "Added user 'alice'\n"
    assert run_passwd(path, "alice", "pw2", None) == 0
    assert capsys.readouterr().out == "Changed password for user 'alice'\n"
    db = UsersDB.load(path)
    assert db.verify("alice", "pw2")
    assert db.get("alice").vhosts == frozenset({"/"})  # type: ignore[union-attr]


def test_run_passwd_prompts_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = iter(["typed-pw", "typed-pw"])
    prompts: list[str] = []
    monkeypatch.setattr("getpass.getpass", lambda prompt: prompts.append(prompt) or next(answers))
    path = tmp_path / "users.toml"
    assert run_passwd(path, "alice", None, None) == 0
    assert prompts == ["Password for alice: ", "Repeat the password: "]
    assert capsys.readouterr().out == "Added user 'alice'\n"
    assert UsersDB.load(path).verify("alice", "typed-pw")


def test_run_passwd_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = iter(["one", "two"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(answers))
    path = tmp_path / "users.toml"
    assert run_passwd(path, "alice", None, None) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "amq-gateway passwd: passwords do not match; nothing changed\n"
    assert not path.exists()


def test_run_passwd_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = write(tmp_path, "[users\n")
    assert run_passwd(broken, "alice", "pw", None) == 1
    assert capsys.readouterr().err == (
        f"amq-gateway passwd: {broken}:1:7: invalid TOML: Expected ']' at the end of a table declaration\n"
    )
    missing_dir = tmp_path / "no" / "users.toml"
    assert run_passwd(missing_dir, "alice", "pw", None) == 1
    assert capsys.readouterr().err == (f"amq-gateway passwd: {missing_dir}: No such file or directory\n")
    assert run_passwd(tmp_path / "u.toml", "alice", "", None) == 1
    assert capsys.readouterr().err == "amq-gateway passwd: the password must not be empty\n"


def test_a_rewrite_keeps_comments_layout_and_credentials(tmp_path: Path) -> None:
    text = (
        "# the demo's users: keep this note\n"
        f'[users.alice]   # the operator\npassword = "{ALICE_HASH}"  # rotated monthly\n'
        'tags = ["administrator"]\n\n'
        "# federation logins\n"
        '[credentials.peering]\npassword = "plain"\n'
    )
    path = write(tmp_path, text)
    assert set_password(path, "alice", "new-pw") is False
    rewritten = path.read_text()
    assert rewritten.replace(rewritten.split('password = "')[1].split('"')[0], ALICE_HASH) == text
    assert set_password(path, "bob", "bob-pw", tags=["monitoring"]) is True
    rewritten = path.read_text()
    for comment in (
        "# the demo's users: keep this note",
        "# the operator",
        "# rotated monthly",
        "# federation",
    ):
        assert comment in rewritten
    db = UsersDB.load(path)
    assert db.verify("alice", "new-pw") and db.verify("bob", "bob-pw")
    assert db.get("bob") == User("bob", None, ("monitoring",))
    assert db.credentials == {"peering": "plain"}


def test_tags_are_set_replaced_and_removed(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    set_password(path, "alice", "pw", tags=["administrator", "monitoring", "administrator"])
    assert UsersDB.load(path).get("alice").tags == ("administrator", "monitoring")  # type: ignore[union-attr]
    set_password(path, "alice", "pw")  # tags not given: kept
    assert UsersDB.load(path).get("alice").tags == ("administrator", "monitoring")  # type: ignore[union-attr]
    set_password(path, "alice", "pw", tags=["monitoring"])
    assert UsersDB.load(path).get("alice").tags == ("monitoring",)  # type: ignore[union-attr]
    set_password(path, "alice", "pw", tags=[])
    assert "tags" not in path.read_text()
    with pytest.raises(
        ValueError, match="unknown tag 'root' \\(known: administrator, monitoring, federation\\)"
    ):
        set_password(path, "alice", "pw", tags=["root"])


# --- permissions -------------------------------------------------------------------------------


def test_permissions_tables(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""[users.alice]
password = "{ALICE_HASH}"
vhosts = ["dev"]

[users.alice.permissions."/"]
configure = '^alice\\.'
write = '^(alice\\.|amq\\.topic$)'
read = ''

[users.alice.topic_permissions."/"."amq.topic"]
write = '^{{username}}\\.'
read = '.*'
""",
    )
    alice = UsersDB.load(path).get("alice")
    assert alice is not None
    assert alice.vhosts == frozenset({"dev"})
    assert alice.permissions == Grants(
        (("/", Permission.of(r"^alice\.", r"^(alice\.|amq\.topic$)", "")),),
        (("/", TopicPermission("amq.topic", r"^{username}\.", ".*")),),
    )


HEAD = f'[users.alice]\npassword = "{ALICE_HASH}"\nvhosts = ["dev"]\n'
PERMS = '[users.alice.permissions."/"]\n'


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            HEAD + PERMS + "configure = '('\nwrite = ''\nread = ''\n",
            """5: users.alice.permissions."/".configure: invalid regular expression '(': """
            "missing ), unterminated subpattern at position 0",
        ),
        (
            HEAD + PERMS + "configure = ''\nwrite = ''\n",
            """4: users.alice.permissions."/": missing key 'read' (an empty pattern, '', grants nothing)""",
        ),
        (
            HEAD + PERMS + "configure = ''\nwrite = ''\nread = ''\nqueue = ''\n",
            """8: users.alice.permissions."/".queue: unknown key (known: configure, write, read)""",
        ),
        (
            HEAD + PERMS.replace("/", "dev") + "configure = ''\nwrite = ''\nread = ''\n",
            "4: users.alice.permissions.dev: vhost 'dev' is also in this user's vhosts list"
            " (full permissions there); keep one",
        ),
        (
            HEAD + PERMS + "configure = 1\nwrite = ''\nread = ''\n",
            """5: users.alice.permissions."/".configure: expected a regular expression string, got 1""",
        ),
        (
            HEAD + '[users.alice.topic_permissions."/"."amq.topic"]\n' + "write = '{username}('\nread = ''\n",
            """5: users.alice.topic_permissions."/"."amq.topic".write: invalid regular expression '{username}(': """,
        ),
        (HEAD + "permissions = 3\n", "4: users.alice.permissions: expected a table of vhosts, got 3"),
    ],
)
def test_permission_errors_name_the_line_and_key(tmp_path: Path, text: str, error: str) -> None:
    path = write(tmp_path, text)
    assert load_error(path).startswith(f"{path}:{error}")


def test_the_documented_users_file_loads_as_documented(tmp_path: Path) -> None:
    """docs/configuration.md's example, with real hashes: bob's patterns and topic permission."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    example = doc[doc.index("### The users file") :].split("```toml\n", 1)[1].split("```", 1)[0]
    example = example.replace("scrypt$n=16384,r=8,p=1$<salt>$<hash>", ALICE_HASH).replace(
        "scrypt$...", ALICE_HASH
    )
    bob = UsersDB.load(write(tmp_path, example)).get("bob smith")
    assert bob is not None
    assert bob.permissions.vhosts == (
        ("staging", Permission.of(r"^bob\.", r"^(bob\.|amq\.topic$)", r"^bob\.")),
    )
    assert bob.permissions.topics == (("staging", TopicPermission("amq.topic", r"^{username}\.", ".*")),)


def test_passwd_keeps_the_permission_tables(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f'[users.alice]\npassword = "{ALICE_HASH}"\n\n'
        "[users.alice.permissions.\"/\"]  # alice's own\nconfigure = '^a'\nwrite = ''\nread = '.*'\n",
    )
    set_password(path, "alice", "new-pw", tags=["monitoring"])
    assert '[users.alice.permissions."/"]  # alice\'s own' in path.read_text()
    alice = UsersDB.load(path).get("alice")
    assert alice is not None and alice.permissions.vhosts == (("/", Permission.of("^a", "", ".*")),)
