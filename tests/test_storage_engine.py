"""crawler.storage.engine: the PRAGMAs every SQLite connection of a crawl runs with."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from scrapy.utils.test import get_crawler

from crawler.pipelines.storage import StoragePipeline
from crawler.storage import Store
from crawler.storage.engine import SQLITE_CACHE_KIB, SQLITE_WAL_AUTOCHECKPOINT

TEMP_STORE_MEMORY = 2


def pragmas(conn: sa.Connection) -> dict[str, Any]:
    return {name: conn.exec_driver_sql(f"PRAGMA {name}").scalar_one()
            for name in ("cache_size", "temp_store", "wal_autocheckpoint", "synchronous",
                         "foreign_keys")}


def test_the_crawls_writer_connection_has_the_cache_temp_store_and_checkpoint(tmp_path) -> None:
    crawler = get_crawler(settings_dict={"STORAGE_URL": f"sqlite:///{tmp_path / 'crawl.db'}"})
    store = StoragePipeline.from_crawler(crawler).store
    try:
        crawl = store.start_crawl("web")
        store.write_batch([{"url": "http://a.test/p/1", "text": "one", "content_hash": "ab",
                            "crawl_id": crawl}], [])
        with store.engine.connect() as conn:  # the connection the batch was written on
            assert pragmas(conn) == {"cache_size": -SQLITE_CACHE_KIB,
                                     "temp_store": TEMP_STORE_MEMORY,
                                     "wal_autocheckpoint": SQLITE_WAL_AUTOCHECKPOINT,
                                     "synchronous": 2, "foreign_keys": 1}
    finally:
        store.close()


def test_every_new_connection_gets_them(tmp_path) -> None:
    with Store(f"sqlite:///{tmp_path / 'crawl.db'}") as store:
        store.check()
        with store.engine.connect() as one, store.engine.connect() as two:
            assert one.connection.dbapi_connection is not two.connection.dbapi_connection
            for conn in (one, two):
                found = pragmas(conn)
                assert found["cache_size"] == -SQLITE_CACHE_KIB
                assert found["temp_store"] == TEMP_STORE_MEMORY
                assert found["wal_autocheckpoint"] == SQLITE_WAL_AUTOCHECKPOINT

