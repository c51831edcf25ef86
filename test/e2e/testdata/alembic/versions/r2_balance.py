"""balance"""
from alembic import op
import sqlalchemy as sa

revision = "r2"
down_revision = "r1"


def upgrade():
    op.add_column("accounts", sa.Column("balance", sa.Numeric(12, 2), nullable=False, server_default="0"))
    op.create_index("accounts_name", "accounts", ["name"], unique=True)
    op.execute("UPDATE accounts SET balance = 10 WHERE name = 'bob'")


def downgrade():
    op.drop_index("accounts_name")
    op.drop_column("accounts", "balance")
