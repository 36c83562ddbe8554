"""Site data: hosts, groups, BMC/PDU/Slurm settings, from a site file or an Ansible inventory."""

from nodegate.site.loader import load_site
from nodegate.site.model import Site, SiteHost

__all__ = ["Site", "SiteHost", "load_site"]
