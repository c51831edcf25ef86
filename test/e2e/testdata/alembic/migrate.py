# Runs `alembic upgrade <target>` against the URL given, with the migration
# history in this directory (plus, with --broken, one that fails halfway).
import os
import shutil
import sys
import tempfile

from alembic import command
from alembic.config import Config

url, target = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
work = tempfile.mkdtemp()
shutil.copy(os.path.join(here, "env.py"), work)
shutil.copytree(os.path.join(here, "versions"), os.path.join(work, "versions"))
if "--broken" in sys.argv:
    with open(os.path.join(work, "versions", "r3_broken.py"), "w") as f:
        f.write('''from alembic import op
revision = "r3"
down_revision = "r2"
def upgrade():
    op.execute("CREATE TABLE audit (id int PRIMARY KEY)")
    op.execute("INSERT INTO audit VALUES (1)")
    op.execute("INSERT INTO no_such_table VALUES (1)")
def downgrade():
    pass
''')
cfg = Config()
cfg.set_main_option("script_location", work)
cfg.set_main_option("sqlalchemy.url", url)
try:
    command.upgrade(cfg, target)
except Exception as e:  # reported to the test on stdout
    print("FAILED", type(e).__name__, str(e).splitlines()[0])
    sys.exit(3)
print("OK")
