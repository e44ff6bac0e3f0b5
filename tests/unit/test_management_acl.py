"""Management asks the node's ACL file about each request (`access method`) and about what an
operation is about to do (`authorize`), for the requesting user only: the node's own work is
not a request."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.broker import Broker
from gateway.management import Management, ManagementError
from gateway.security.acl import AclRules


@pytest.fixture
def management(tmp_path: Path) -> Management:
    path = tmp_path / "policy.acl"
    path.write_text(
        "acl deny dev access method schemapackage=amq-gateway schemaclass=queues\n"
        "acl deny dev create link name=10.*\n"
        "acl allow all all\n"
    )
    rules = AclRules.load(path)
    return Management(Broker(node_name="m"), "m", acl=lambda: rules)


def test_access_method_names_the_request_its_package_and_class(management: Management) -> None:
    with pytest.raises(ManagementError) as refused:
        management.call("queues.list", {}, user="dev")
    assert (refused.value.kind, refused.value.message) == (
        "access",
        "the ACL file refuses user 'dev' access method 'queues.list'",
    )
    assert management.call("exchanges.list", {}, user="dev")
    assert management.call("queues.list", {}, user="ops") is not None


def test_authorize_asks_for_the_current_requester_only(management: Management) -> None:
    def open_link(host: str) -> str:
        management.authorize("create", "link", host)
        return host

    management.operations["links.open"] = open_link
    with pytest.raises(ManagementError, match="refuses user 'dev' create link '10.0.0.1:5672'"):
        management.call("links.open", {"host": "10.0.0.1:5672"}, user="dev")
    assert management.call("links.open", {"host": "10.0.0.1:5672"}, user="ops") == "10.0.0.1:5672"
    # The node's own work (restoring stored links, its config's federations): no requester.
    management.authorize("create", "link", "10.0.0.1:5672")
    assert management.call("links.open", {"host": "10.0.0.1:5672"}) == "10.0.0.1:5672"


def test_without_an_acl_file_nothing_is_asked() -> None:
    management = Management(Broker(node_name="m"), "m")
    assert management.call("queues.list", {}, user="dev") == []
