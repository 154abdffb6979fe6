from __future__ import annotations

import pytest

from crawler.urls.seeds import SeedError, load_seeds, parse_seeds, seeds_from_args


def test_comments_blank_lines_and_default_scheme():
    seeds = parse_seeds(
        [
            "# my seeds",
            "",
            "   ",
            "https://Example.com/a#top",
            "example.org/docs",
            "  http://example.net:8080/x  ",
            "\t# indented comment",
        ]
    )
    assert seeds.urls == [
        "https://Example.com/a#top",
        "https://example.org/docs",
        "http://example.net:8080/x",
    ]
    assert seeds.canonical == [
        "https://example.com/a",
        "https://example.org/docs",
        "http://example.net:8080/x",
    ]
    assert seeds.hosts == {"example.com", "example.org", "example.net"}


def test_host_with_port_and_no_scheme_means_https():
    seeds = parse_seeds(["localhost:8080/start"])
    assert seeds.urls == ["https://localhost:8080/start"]


def test_every_invalid_line_is_reported_with_its_number():
    lines = [
        "https://ok.example/",
        "ftp://files.example/x",
        "# fine",
        "mailto:someone@example.com",
        "http://",
        "https://good.example/",
        "http://exa mple.com/",
    ]
    with pytest.raises(SeedError) as info:
        parse_seeds(lines, source="seeds.txt")
    message = str(info.value)
    assert "seeds.txt" in message
    numbers = [p.split(":", 1)[0] for p in info.value.problems]
    assert numbers == ["line 2", "line 4", "line 5", "line 7"]
    assert "ftp://files.example/x" in message
    assert "line 1" not in message and "line 6" not in message


def test_idn_seed_host_is_matched_in_punycode():
    seeds = parse_seeds(["https://Bücher.example/katalog"])
    assert seeds.hosts == {"xn--bcher-kva.example"}


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(SeedError, match="file not found"):
        load_seeds(tmp_path / "missing.txt")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("https://caf\xe9.example/\n".encode("latin-1"))
    with pytest.raises(SeedError, match="not UTF-8") as info:
        load_seeds(latin)
    assert str(latin) in str(info.value)
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing here\n\n")
    with pytest.raises(SeedError, match="no seed URL"):
        load_seeds(empty)


def test_bom_is_tolerated(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffhttps://example.com/\n".encode())
    assert load_seeds(path).urls == ["https://example.com/"]


def test_seeds_and_urls_arguments_combine(tmp_path):
    path = tmp_path / "seeds.txt"
    path.write_text("https://a.example/\n")
    seeds = seeds_from_args(seeds=str(path), urls="https://b.example/,c.example")
    assert seeds.urls == ["https://a.example/", "https://b.example/", "https://c.example"]
    with pytest.raises(SeedError, match="-a seeds=FILE"):
        seeds_from_args()


def test_url_host_matches_urlsplit_on_canonical_urls():
    from urllib.parse import urlsplit

    from crawler.urls.urlnorm import url_host as canonical_host

    for url in [
        "http://example.com/",
        "https://user:pw@example.com:8443/a?b#c",
        "http://[2001:db8::1]:8080/x",
        "http://[::1]/",
        "http://127.0.0.1:5000/p",
    ]:
        assert canonical_host(url) == urlsplit(url).hostname


def test_a_10mb_line_is_refused_unread(tmp_path):
    import tracemalloc

    from crawler.urls.seeds import LINE_MAX_BYTES

    path = tmp_path / "huge.txt"
    with path.open("wb") as out:
        out.write(b"https://ok.example/\n")
        out.write(b"https://long.example/" + b"a" * 10_000_000 + b"\n")
        out.write(b"ftp://bad.example/\n")
    tracemalloc.start()
    try:
        with pytest.raises(SeedError) as info:
            load_seeds(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert str(path) in message
    assert "line 2: 'https://long.example/aaa" in message
    assert f"(cut, 10000021 bytes in all): longer than the {LINE_MAX_BYTES} bytes" in message
    assert "line 3: 'ftp://bad.example/'" in message  # the lines after it are still read
    # Read 64 KiB at a time: the 10 MB line is never held (read whole, it took 1 GB of RSS).
    assert peak < 1_000_000, peak


def test_lines_split_as_before_and_bad_bytes_located(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"\xef\xbb\xbfhttps://a.example/\r\nhttps://b.example/\rftp://c/\n")
    with pytest.raises(SeedError, match="line 3: 'ftp://c/'"):
        load_seeds(path)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"https://a.example/\nhttps://caf\xe9.example/\n")
    with pytest.raises(SeedError, match=r"not UTF-8 text \(byte 30\)"):
        load_seeds(latin)
    exact = tmp_path / "exact.txt"
    url = b"https://a.example/" + b"x" * (64 * 1024 - 18)
    exact.write_bytes(url + b"\n")  # a line of exactly LINE_MAX_BYTES is read
    assert load_seeds(exact).urls == [url.decode()]
