"""The private-address guard's address test (issue 23, item 8): IPv6 forms that carry an IPv4
address are judged by the address they reach, site-local and NAT64 local-use are private, and
public addresses stay public in every form."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.urls.scope import embedded_ipv4, is_private_address


@pytest.mark.parametrize(("address", "reaches"), [
    ("64:ff9b::a9fe:a9fe", "169.254.169.254"),  # NAT64 (RFC 6052) of the metadata address
    ("64:ff9b::a00:1", "10.0.0.1"),  # NAT64
    ("64:ff9b::7f00:1", "127.0.0.1"),  # NAT64 of loopback
    ("2002:a00:1::1", "10.0.0.1"),  # 6to4 (RFC 3056)
    ("2002:a9fe:a9fe:1:2:3:4:5", "169.254.169.254"),  # 6to4, any suffix
    ("::169.254.169.254", "169.254.169.254"),  # IPv4-compatible (RFC 4291 2.5.5.1)
    ("::a00:1", "10.0.0.1"),  # the same, in hex
    ("::ffff:10.0.0.1", "10.0.0.1"),  # IPv4-mapped
    ("::ffff:a9fe:a9fe", "169.254.169.254"),  # IPv4-mapped, in hex
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "10.0.0.1"),  # Teredo: client bits inverted
])
def test_ipv6_forms_of_private_ipv4_addresses_are_private(address, reaches) -> None:
    assert embedded_ipv4(ipaddress.IPv6Address(address)) == ipaddress.IPv4Address(reaches)
    assert is_private_address(address) is True


@pytest.mark.parametrize("address", [
    "fec0::1",  # site-local (RFC 3879 deprecated it; networks still route it inside)
    "feff:ffff::1",  # the top of fec0::/10
    "64:ff9b:1::808:808",  # NAT64 local-use prefix (RFC 8215): never global, whatever it embeds
    "64:ff9b:1:ffff::1",
])
def test_site_local_and_nat64_local_use_are_private(address) -> None:
    assert is_private_address(address) is True


@pytest.mark.parametrize("address", [
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "64:ff9b::5db8:d822",  # NAT64 of 93.184.216.34
    "2002:808:808::1",  # 6to4 of 8.8.8.8
    "::ffff:8.8.8.8",  # IPv4-mapped
    "::8.8.8.8",  # IPv4-compatible
    "2606:4700::1111",
    "2a00:1450:4001:80e::200e",
])
def test_public_addresses_stay_public_in_every_form(address) -> None:
    assert is_private_address(address) is False


def test_addresses_that_carry_no_ipv4_address() -> None:
    assert embedded_ipv4(ipaddress.IPv6Address("2606:4700::1111")) is None
    assert embedded_ipv4(ipaddress.IPv6Address("64:ff9b:1::a00:1")) is None  # local-use: no rule
    assert is_private_address("::") and is_private_address("::1")


ipv4s = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)


@given(ipv4s, st.integers(0, 2**80 - 1))
def test_every_embedding_is_judged_by_the_ipv4_address_it_reaches(ipv4, suffix) -> None:
    """Mapped, compatible, NAT64 and 6to4 forms of an IPv4 address are private exactly when the
    IPv4 address is (any 6to4 subnet and interface id)."""
    value = int(ipv4)
    forms = [
        ipaddress.IPv6Address((0xFFFF << 32) | value),
        ipaddress.IPv6Address(value),
        ipaddress.IPv6Address((0x64FF9B << 96) | value),
        ipaddress.IPv6Address((0x2002 << 112) | (value << 80) | suffix),
    ]
    expected = is_private_address(str(ipv4))
    for form in forms:
        assert embedded_ipv4(form) == ipv4
        assert is_private_address(str(form)) is expected, form


@given(st.integers(0, 2**128 - 1))
def test_never_raises_and_a_private_embedding_always_wins(value) -> None:
    ip = ipaddress.IPv6Address(value)
    private = is_private_address(str(ip))
    ipv4 = embedded_ipv4(ip)
    if ipv4 is not None and is_private_address(str(ipv4)):
        assert private is True
    if not ip.is_global and ip.ipv4_mapped is None:  # a mapped form is the IPv4 address
        assert private is True
