"""The engine tests find this host on the engine's bridge whether or not the engine reports a gateway."""

from tests.engine.conftest import bridge_address


def test_a_new_engine_reports_only_the_subnet():
    assert bridge_address({"IPAM": {"Config": [{"Subnet": "172.17.0.0/16"}]}}) == "172.17.0.1"


def test_a_reported_gateway_is_taken_as_it_is():
    attrs = {"IPAM": {"Config": [{"Subnet": "10.20.0.0/24", "Gateway": "10.20.0.254"}]}}
    assert bridge_address(attrs) == "10.20.0.254"
