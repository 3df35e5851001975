"""hoardDB for asyncio, under its public name: ``hoarddb.aio`` is :mod:`hoarddb.client.aio`.

    import hoarddb.aio

    async def main():
        async with await hoarddb.aio.connect("hoarddb://app:secret@127.0.0.1:7070/") as client:
            await client["app"].Comments.push({"Text": "hi"})
"""

from .client.aio import AsyncExecutor, Bucket, Client, Database, Document, StoreField, connect

__all__ = ["connect", "Client", "Database", "Bucket", "Document", "StoreField", "AsyncExecutor"]
