;; A tiny ALFWorld problem on the ALFRED domain (alfworld's alfred.pddl), written for the
;; tests of rft-plugin-alfworld: one room, an apple on a countertop, a closed fridge and a
;; dining table. Goal (ALFWorld's pick_and_place_simple): an apple on the dining table.
(define (problem tiny_apple)
    (:domain alfred)
    (:objects
        agent1 - agent
        AppleType - otype
        CounterTopType - rtype
        FridgeType - rtype
        DiningTableType - rtype
        Apple_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50 - object
        CounterTop_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50 - receptacle
        Fridge_bar__plus_01_dot_00_bar__plus_00_dot_00_bar__plus_01_dot_00 - receptacle
        DiningTable_bar__plus_00_dot_00_bar__plus_00_dot_00_bar__minus_02_dot_00 - receptacle
        loc_bar_0_bar_0_bar_0_bar_0 - location
        loc_bar__minus_4_bar_2_bar_3_bar_30 - location
        loc_bar_4_bar_4_bar_1_bar_60 - location
        loc_bar_0_bar__minus_8_bar_2_bar_30 - location
    )
    (:init
        (= (total-cost) 0)
        (atLocation agent1 loc_bar_0_bar_0_bar_0_bar_0)
        (receptacleType CounterTop_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50 CounterTopType)
        (receptacleType Fridge_bar__plus_01_dot_00_bar__plus_00_dot_00_bar__plus_01_dot_00 FridgeType)
        (receptacleType DiningTable_bar__plus_00_dot_00_bar__plus_00_dot_00_bar__minus_02_dot_00 DiningTableType)
        (receptacleAtLocation CounterTop_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50 loc_bar__minus_4_bar_2_bar_3_bar_30)
        (receptacleAtLocation Fridge_bar__plus_01_dot_00_bar__plus_00_dot_00_bar__plus_01_dot_00 loc_bar_4_bar_4_bar_1_bar_60)
        (receptacleAtLocation DiningTable_bar__plus_00_dot_00_bar__plus_00_dot_00_bar__minus_02_dot_00 loc_bar_0_bar__minus_8_bar_2_bar_30)
        (openable Fridge_bar__plus_01_dot_00_bar__plus_00_dot_00_bar__plus_01_dot_00)
        (objectType Apple_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50 AppleType)
        (pickupable Apple_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50)
        (coolable Apple_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50)
        (inReceptacle Apple_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50 CounterTop_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50)
        (objectAtLocation Apple_bar__minus_01_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_50 loc_bar__minus_4_bar_2_bar_3_bar_30)
        (canContain CounterTopType AppleType)
        (canContain FridgeType AppleType)
        (canContain DiningTableType AppleType)
    )
    (:goal
        (and
            (exists (?r - receptacle)
                (exists (?o - object)
                    (and
                        (objectType ?o AppleType)
                        (receptacleType ?r DiningTableType)
                        (inReceptacle ?o ?r)
                    )
                )
            )
        )
    )
)
