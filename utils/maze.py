"""Maze geometry shared by data generation, evaluation and the analyses: free cells, BFS distances and
the OGBench maze envs' BFS subgoal oracle, tabulated once per maze."""

from collections import deque

import numpy as np

# get_oracle_subgoal's neighbour order; with its strict `<`, the first of tied neighbours wins.
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1))


def free_and_vertex_cells(maze_map):
    """Free cells, and free cells minus straight corridor cells (OGBench's navigate goals); row-major."""
    free, vertex = [], []
    for i, j in np.argwhere(maze_map == 0):
        cell = (int(i), int(j))
        free.append(cell)
        up, down, left, right = maze_map[i - 1, j], maze_map[i + 1, j], maze_map[i, j - 1], maze_map[i, j + 1]
        vertical_corridor = up == 0 and down == 0 and left == 1 and right == 1
        horizontal_corridor = left == 0 and right == 0 and up == 1 and down == 1
        if not (vertical_corridor or horizontal_corridor):
            vertex.append(cell)
    return free, vertex


def bfs_distances(maze_map, source_ij):
    """BFS step counts from `source_ij` over free cells, -1 on walls and unreachable cells.

    Same values as the map returned by the env's get_oracle_subgoal (including its quirk that a
    wall source still gets 0 and expands into its free neighbours).
    """
    height, width = maze_map.shape
    distances = np.full((height, width), -1, dtype=np.int64)
    distances[source_ij] = 0
    queue = deque([source_ij])
    while queue:
        i, j = queue.popleft()
        for di, dj in NEIGHBOURS:
            ni, nj = i + di, j + dj
            if 0 <= ni < height and 0 <= nj < width and maze_map[ni, nj] == 0 and distances[ni, nj] == -1:
                distances[ni, nj] = distances[i, j] + 1
                queue.append((ni, nj))
    return distances


class MazeOracle:
    """The env's BFS subgoal oracle, tabulated for every (goal cell, agent cell) pair of the grid.

    ``subgoal_xy[goal_i, goal_j, agent_i, agent_j]`` is the subgoal that
    ``env.unwrapped.get_oracle_subgoal(agent_xy, goal_xy)`` returns for positions in those cells.
    Wall cells are included so that the table is total, as the env's function is.
    """

    def __init__(self, env):
        maze = env.unwrapped
        self.maze_map = np.asarray(maze.maze_map)
        # Kept separate (not pre-summed) so that `cell` rounds exactly like the env's xy_to_ij.
        self._unit = maze._maze_unit
        self._offset_x = maze._offset_x
        self._offset_y = maze._offset_y
        height, width = self.maze_map.shape
        self.free_cells, self.vertex_cells = free_and_vertex_cells(self.maze_map)
        # distances[g_i, g_j, i, j]: BFS distance of cell (i, j) from cell (g_i, g_j).
        self.distances = np.array([[bfs_distances(self.maze_map, (i, j)) for j in range(width)] for i in range(height)])
        subgoal_ij = self._subgoal_cells()
        self.subgoal_xy = np.stack(
            [subgoal_ij[..., 1] * self._unit - self._offset_x, subgoal_ij[..., 0] * self._unit - self._offset_y],
            axis=-1,
        )

    def _subgoal_cells(self):
        """Vectorised get_oracle_subgoal: start at the agent's cell, take each free neighbour in
        NEIGHBOURS order whose distance is strictly below the best so far."""
        height, width = self.maze_map.shape
        agent_i, agent_j = np.meshgrid(np.arange(height), np.arange(width), indexing='ij')
        best_i = np.broadcast_to(agent_i, self.distances.shape)
        best_j = np.broadcast_to(agent_j, self.distances.shape)
        best_distance = self.distances
        for di, dj in NEIGHBOURS:
            ni, nj = agent_i + di, agent_j + dj
            inside = (ni >= 0) & (ni < height) & (nj >= 0) & (nj < width)
            ni, nj = np.clip(ni, 0, height - 1), np.clip(nj, 0, width - 1)
            neighbour_distance = self.distances[:, :, ni, nj]
            better = inside & (self.maze_map[ni, nj] == 0) & (neighbour_distance < best_distance)
            best_distance = np.where(better, neighbour_distance, best_distance)
            best_i = np.where(better, ni, best_i)
            best_j = np.where(better, nj, best_j)
        return np.stack([best_i, best_j], axis=-1)

    def cell(self, xy):
        """The env's xy_to_ij."""
        i = int((xy[1] + self._offset_y + 0.5 * self._unit) / self._unit)
        j = int((xy[0] + self._offset_x + 0.5 * self._unit) / self._unit)
        return i, j

    def subgoal(self, agent_xy, goal_xy):
        """Same array as the first output of env.unwrapped.get_oracle_subgoal(agent_xy, goal_xy)."""
        return self.subgoal_xy[self.cell(goal_xy) + self.cell(agent_xy)].copy()
