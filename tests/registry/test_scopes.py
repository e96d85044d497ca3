import pytest

from registry.scopes import is_valid_scope, scope_covers, tool_scope

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("granted", "requested", "covered"), [
    (["payments:refund"], ["payments:refund"], True),
    (["payments:*"], ["payments:refund"], True),
    (["payments:*"], ["payments:*"], True),
    (["payments:*"], ["payments:eu:*"], True),
    (["*"], ["anything:at_all", "crm:*"], True),
    (["payments:refund"], ["payments:*"], False),
    (["payments:refund"], ["payments:charge"], False),
    (["payments:*"], ["payment:refund"], False),
    (["payments:*"], ["pay*"], False),
    (["crm:read", "payments:*"], ["crm:read", "payments:x"], True),
    (["crm:read"], ["crm:read", "crm:update"], False),
    ([], ["crm:read"], False),
    (["crm:read"], [], True),
])
def test_it_covers_exact_scopes_and_trailing_star_prefixes(granted, requested, covered):
    assert scope_covers(granted, requested) is covered


def test_it_accepts_a_single_requested_scope_as_a_string():
    assert scope_covers(["crm:*"], "crm:update")
    assert not scope_covers(["crm:read"], "crm:update")


def test_it_names_tool_operations_as_tool_colon_operation():
    assert tool_scope("crm", "update") == "crm:update"
    assert scope_covers(["crm:*"], tool_scope("crm", "update"))


@pytest.mark.parametrize(("scope", "valid"), [
    ("*", True), ("crm:*", True), ("crm:read", True), ("a/b.c_d-e:f", True),
    ("", False), ("crm:*:read", False), ("**", False), ("crm read", False), ("x" * 255, True), ("x" * 256, False),
])
def test_it_validates_scope_syntax(scope, valid):
    assert is_valid_scope(scope) is valid
