"""Agent registry: `agent_name` in a config -> agent class. A new agent is one file here plus one line below."""

from agents.byol_gamma import BYOLGammaAgent
from agents.crl import CRLAgent
from agents.fb import FBAgent
from agents.gcbc import GCBCAgent
from agents.gciql import GCIQLAgent
from agents.gcivl import GCIVLAgent
from agents.hierarchical import HBYOLGammaAgent, HGCBCAgent, HGCBCPhiAgent
from agents.hiql import HIQLAgent
from agents.qrl import QRLAgent
from agents.tdsr import TDSRAgent
from agents.tra import TRAAgent
from utils.errors import ConfigError

AGENTS = {
    'gcbc': GCBCAgent,
    'byol_gamma': BYOLGammaAgent,
    'tra': TRAAgent,
    'tdsr': TDSRAgent,
    'hgcbc': HGCBCAgent,
    'hgcbc_phi': HGCBCPhiAgent,
    'hbyol_gamma': HBYOLGammaAgent,
    'fb': FBAgent,
    'gcivl': GCIVLAgent,
    'gciql': GCIQLAgent,
    'qrl': QRLAgent,
    'crl': CRLAgent,
    'hiql': HIQLAgent,
}


def get_agent_class(agent_name: str):
    if agent_name not in AGENTS:
        raise ConfigError(f'Unknown agent {agent_name!r}. Valid agents: {", ".join(sorted(AGENTS))}.')
    return AGENTS[agent_name]
