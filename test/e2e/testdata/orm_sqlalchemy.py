"""An ordinary SQLAlchemy 2.0 ORM workload, run unmodified against two
nodes of an Ordo cluster (test/e2e/orm_test.go). It prints one line per
step; the Go test checks the lines and that every node ends identical."""
import sys
import time

from sqlalchemy import (ForeignKey, String, Numeric, UniqueConstraint, create_engine, func, insert, select, update)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import (DeclarativeBase, Mapped, Session, mapped_column, relationship, selectinload)


class Base(DeclarativeBase):
    pass


class Author(Base):
    __tablename__ = "author"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(80), unique=True)
    books: Mapped[list["Book"]] = relationship(back_populates="author", cascade="all, delete-orphan", passive_deletes=True)


class Book(Base):
    __tablename__ = "book"
    id: Mapped[int] = mapped_column(primary_key=True)
    author_id: Mapped[int] = mapped_column(ForeignKey("author.id", ondelete="CASCADE"), index=True)
    title: Mapped[str] = mapped_column(String(200))
    price: Mapped[float] = mapped_column(Numeric(10, 2))
    stock: Mapped[int] = mapped_column(default=0)
    author: Mapped[Author] = relationship(back_populates="books")
    __table_args__ = (UniqueConstraint("author_id", "title"),)


class Tag(Base):
    __tablename__ = "tag"
    id: Mapped[int] = mapped_column(primary_key=True)
    label: Mapped[str] = mapped_column(String(40))


def retry(engine, work):
    """Runs work(session) in a transaction, again after a serialization
    failure (SQLSTATE 40001), as applications on PostgreSQL do."""
    for attempt in range(20):
        try:
            with Session(engine) as s, s.begin():
                return work(s)
        except OperationalError as e:
            if getattr(e.orig, "sqlstate", None) != "40001":
                raise
            time.sleep(0.05 * (attempt + 1))
    raise RuntimeError("20 serialization failures in a row")


def main(url1, url2):
    e1 = create_engine(url1, pool_pre_ping=True)
    e2 = create_engine(url2, pool_pre_ping=True)
    Base.metadata.create_all(e1)
    print("schema created")

    with Session(e1) as s, s.begin():
        for i in range(5):
            a = Author(name=f"author {i}")
            a.books = [Book(title=f"book {i}.{j}", price=10 + j, stock=5) for j in range(4)]
            s.add(a)
    print("authors 5 books 20")

    # A nested transaction (savepoint) that fails, inside one that commits:
    # Django's atomic(), Rails' nested transactions, psql's ON_ERROR_ROLLBACK.
    with Session(e1) as s, s.begin():
        s.add(Author(name="author 5"))
        try:
            with s.begin_nested():
                s.add(Author(name="author 0"))  # duplicate name
                s.flush()
        except IntegrityError as e:
            print("savepoint rolled back", e.orig.sqlstate)
        s.add(Author(name="author 6"))
    with Session(e1) as s:
        print("authors after the savepoint", s.scalar(select(func.count()).select_from(Author)))

    # executemany of an insert: psycopg sends it as one pipelined batch.
    with Session(e1) as s, s.begin():
        s.execute(insert(Tag), [{"label": f"tag {i}"} for i in range(50)])
    print("tags 50")

    # Through node 2 once it has the rows: eager loading, an ORM update with
    # dirty tracking, a row lock.
    # (Node 2 may not have applied the schema yet: its reads are local.)
    for _ in range(300):
        try:
            with Session(e2) as s:
                if s.scalar(select(func.count()).select_from(Tag)) == 50:
                    break
        except ProgrammingError:
            pass  # the table is not there yet
        time.sleep(0.1)
    else:
        raise RuntimeError("node 2 never had the 50 tags")

    def restock(s):
        a = s.scalars(select(Author).where(Author.name == "author 1").options(selectinload(Author.books))).one()
        for b in a.books:
            b.stock += 10
        return len(a.books)
    print("restocked", retry(e2, restock))

    def sell(s):
        b = s.scalars(select(Book).where(Book.title == "book 2.1").with_for_update()).one()
        b.stock -= 1
        return b.stock
    print("sold, stock", retry(e2, sell))

    # The same row updated through both nodes at once, many times: every
    # update is kept, retried after a 40001 where two nodes collided.
    import threading
    errors = []

    def buyer(engine, n):
        try:
            for _ in range(n):
                retry(engine, lambda s: s.execute(update(Book).where(Book.title == "book 3.3").values(stock=Book.stock + 1)))
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=buyer, args=(e, 15)) for e in (e1, e2, e1, e2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    print("concurrent increments done")  # the test reads the result on every node

    # Deleting an author deletes its books (ON DELETE CASCADE) everywhere.
    def drop(s):
        s.delete(s.scalars(select(Author).where(Author.name == "author 4")).one())
    retry(e1, drop)
    with Session(e1) as s:
        print("authors", s.scalar(select(func.count()).select_from(Author)),
              "books", s.scalar(select(func.count()).select_from(Book)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
